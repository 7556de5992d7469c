//go:build !meshlet_keylog

package mtls

import "io"

// keyLogWriter is where ClientConfig logs TLS secrets: nowhere. Only a
// sidecar built with -tags meshlet_keylog (bench/pair.sh's latency split)
// can log them; a production build has no such switch.
func keyLogWriter() io.Writer { return nil }
