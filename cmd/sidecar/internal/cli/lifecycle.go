package cli

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// drainFlags defines the flags of `sidecar drain`, the injected preStop
// hook: it asks the running sidecar to drain (stop accepting, finish
// in-flight work) and waits for the drain period so the app's last
// requests still go through.
func drainFlags(fs *flag.FlagSet, _ func(string) string) func(io.Writer) error {
	admin := fs.String("admin", "127.0.0.1:15000", "admin address `HOST:PORT` of the running sidecar; drain POSTs /drain there.")
	wait := fs.Duration("wait", 5*time.Second, "wait `DURATION` after starting the drain before returning, so the app's last requests still go through.")
	return func(out io.Writer) error { return drain(*admin, *wait, out) }
}

func drain(admin string, wait time.Duration, out io.Writer) error {
	resp, err := http.Post("http://"+admin+"/drain", "text/plain", nil)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("drain: admin answered %s", resp.Status)
	}
	fmt.Fprintln(out, "draining")
	time.Sleep(wait)
	return nil
}

// waitFlags defines the flags of `sidecar wait`, the classic-mode
// postStart hook: it returns once the sidecar is ready, so the kubelet
// starts the app only then.
func waitFlags(fs *flag.FlagSet, _ func(string) string) func(io.Writer) error {
	health := fs.String("health", "127.0.0.1:15021", "health address `HOST:PORT` of the sidecar, polled at /healthz/ready every 100 ms.")
	timeout := fs.Duration("timeout", 60*time.Second, "give up, exiting non-zero, after `DURATION`.")
	return func(out io.Writer) error { return wait(*health, *timeout, out) }
}

func wait(health string, timeout time.Duration, out io.Writer) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get("http://" + health + "/healthz/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Fprintln(out, "ready")
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wait: sidecar not ready at %s after %v (last error: %v)", health, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
