package cli

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// drain is `sidecar drain`, the injected preStop hook: it asks the running
// sidecar to drain (stop accepting, finish in-flight work) and waits for
// the drain period so the app's last requests still go through.
func drain(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	admin := fs.String("admin", "127.0.0.1:15000", "the sidecar's admin address")
	wait := fs.Duration("wait", 5*time.Second, "how long to wait after starting the drain")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("drain: %w\n%s", err, usage)
	}
	resp, err := http.Post("http://"+*admin+"/drain", "text/plain", nil)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("drain: admin answered %s", resp.Status)
	}
	fmt.Fprintln(out, "draining")
	time.Sleep(*wait)
	return nil
}

// wait is `sidecar wait`, the classic-mode postStart hook: it returns once
// the sidecar is ready, so the kubelet starts the app only then.
func wait(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	health := fs.String("health", "127.0.0.1:15021", "the sidecar's health address")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("wait: %w\n%s", err, usage)
	}
	deadline := time.Now().Add(*timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get("http://" + *health + "/healthz/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Fprintln(out, "ready")
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wait: sidecar not ready at %s after %v (last error: %v)", *health, *timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
