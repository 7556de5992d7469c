// Command injector is meshlet's control plane. Today it offers the dry run
// of sidecar injection: `injector inject -f manifest.yaml` prints the
// manifest as admission would store it (like `istioctl kube-inject`).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/meshlet-dev/meshlet/webhook"
)

const usage = `usage:
  injector inject -f manifest.yaml [-image IMAGE] [-server-minor 30]
      print the manifest with the meshlet sidecar injected into its Pods and pod templates ("-f -" reads stdin)`

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "injector:", err)
		os.Exit(2)
	}
}

func run(args []string, stdin io.Reader, out io.Writer) error {
	if len(args) == 0 || args[0] != "inject" {
		return fmt.Errorf("%s", usage)
	}
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("f", "", "manifest file, or - for stdin")
	cfg := webhook.DefaultConfig()
	fs.StringVar(&cfg.Image, "image", cfg.Image, "sidecar image")
	fs.IntVar(&cfg.ServerMinor, "server-minor", 0, "Kubernetes minor version of the target cluster (below 29: classic sidecar)")
	if err := fs.Parse(args[1:]); err != nil || *file == "" {
		return fmt.Errorf("inject: need -f FILE\n%s", usage)
	}
	var data []byte
	var err error
	if *file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("inject: read %s: %w", *file, err)
	}
	res, err := webhook.InjectManifest(data, cfg)
	if err != nil {
		return err
	}
	_, err = out.Write(res)
	return err
}
