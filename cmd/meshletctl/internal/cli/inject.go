package cli

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline"
	"github.com/meshlet-dev/meshlet/webhook"
)

func injectFlags(fs *flag.FlagSet, _ func(string) string, stdin io.Reader) func(io.Writer) error {
	file := fs.String("f", "", "manifest `FILE` to inject (YAML, several documents allowed); - reads stdin. Required.")
	cfg := webhook.DefaultConfig()
	fs.StringVar(&cfg.Image, "image", cfg.Image, "sidecar `IMAGE` to inject.")
	fs.IntVar(&cfg.ServerMinor, "server-minor", 0, "Kubernetes minor version `N` of the target cluster (1.N): below 29 the sidecar is injected as a classic sidecar (the first container, with a sidecar wait postStart hook), else as a native one (an init container with restartPolicy Always); 0: native.")
	return func(out io.Writer) error {
		if *file == "" {
			return cmdline.Usagef("need -f FILE")
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
}
