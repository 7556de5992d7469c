// Command pause is the e2e nodes' pod sandbox image: it holds the pod's
// namespaces, reaps the children it inherits as PID 1, and exits on SIGINT or
// SIGTERM. Built statically and packed into docker.io/local/pause:v1 by the
// real-nodes tests (no registry is reachable here).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
