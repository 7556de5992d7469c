//go:build meshlet_keylog

package mtls

import (
	"io"
	"log/slog"
	"os"
	"sync"
)

// keyLogWriter appends the TLS secrets of this sidecar's outbound mesh
// connections, in NSS key log format, to the file MESHLET_TLS_KEYLOG
// names, so that a capture of the mesh hop can be decrypted
// (bench/pair.sh's latency split). Built only with -tags meshlet_keylog.
var keyLogWriter = sync.OnceValue(func() io.Writer {
	path := os.Getenv("MESHLET_TLS_KEYLOG")
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		slog.Error("mtls: cannot open the TLS key log", "path", path, "err", err)
		return nil
	}
	slog.Warn("mtls: logging TLS secrets of outbound mesh connections (a benchmark build)", "path", path)
	return f
})
