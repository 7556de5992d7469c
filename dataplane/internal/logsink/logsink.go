// Package logsink writes the data plane's access log: each worker renders
// its lines into a buffer of its own, and one goroutine writes the
// buffers to the file or stdout, off the request path.
package logsink

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb/accesslog"
)

// Logger renders lines on the request goroutine into its worker's
// buffer and writes the buffers from one goroutine of its own, off the
// request path, as Envoy's workers fill a file's buffer that its flush
// thread writes: every flushInterval, or sooner once a buffer holds
// accessLogFlushAt bytes. So a slow stdout never stalls traffic (a buffer
// that reaches accessLogBufferMax drops further lines, counted), and a
// request costs no goroutine hand-off and no write(2) of its own (which
// cost context switches and CPU per request: bench/RESULTS.md). Each
// worker has its own buffer (so
// logging takes no lock shared between workers).
type Logger struct {
	format        config.AccessLogFormat
	shards        []*logShard
	dropped       atomic.Uint64
	written       atomic.Uint64
	off           bool
	w             io.Writer
	closer        io.Closer
	flushInterval time.Duration
	kick          chan struct{} // a buffer passed accessLogFlushAt
	stop          chan struct{}
	done          chan struct{}
	once          sync.Once
}

// logShard is one worker's buffer of rendered lines.
type logShard struct {
	mu    sync.Mutex
	buf   []byte
	lines uint64
}

const (
	// accessLogFlushAt is a worker's buffered bytes that wake the writer
	// before its interval.
	accessLogFlushAt = 32 << 10
	// accessLogBufferMax is a worker's buffered bytes past which lines are
	// dropped (the writer is stalled): about 4,000 lines, 130 ms of a
	// worker at 30,000 requests per second.
	accessLogBufferMax = 1 << 20
)

// New is a logger of cfg, with its defaults resolved
// (config.Config.WithDefaults), with a buffer for each of workers, writing
// to override if it is not nil.
func New(cfg config.AccessLog, override io.Writer, workers int) (*Logger, error) {
	a := &Logger{format: cfg.Format, flushInterval: cfg.FlushInterval, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	if a.flushInterval <= 0 {
		return nil, fmt.Errorf("logsink: access_log.flush_interval %v: want > 0 (config.Config.WithDefaults resolves 0)", a.flushInterval)
	}
	switch {
	case override != nil:
		a.w = override
	case cfg.Path == "off":
		a.off = true
		return a, nil
	case cfg.Path == "" || cfg.Path == "-":
		a.w = os.Stdout
	default:
		f, err := os.OpenFile(cfg.Path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("dataplane: access_log.path: %w", err)
		}
		a.w, a.closer = f, f
	}
	for range max(workers, 1) {
		a.shards = append(a.shards, &logShard{})
	}
	go a.run()
	return a, nil
}

// run writes the buffers every flushInterval and when kicked, until stop;
// then once more.
func (a *Logger) run() {
	defer close(a.done)
	t := time.NewTicker(a.flushInterval)
	defer t.Stop()
	var spare []byte
	for {
		select {
		case <-t.C:
		case <-a.kick:
		case <-a.stop:
			a.Flush(&spare)
			return
		}
		a.Flush(&spare)
	}
}

// Flush writes what every worker has buffered: each buffer is swapped for
// spare under its lock and written outside it.
func (a *Logger) Flush(spare *[]byte) {
	for _, sh := range a.shards {
		sh.mu.Lock()
		out, n := sh.buf, sh.lines
		sh.buf, sh.lines = (*spare)[:0], 0
		sh.mu.Unlock()
		if len(out) > 0 {
			if _, err := a.w.Write(out); err == nil {
				a.written.Add(n)
			}
		}
		if cap(out) > 4*accessLogFlushAt {
			out = nil // a stall grew it: do not keep a megabyte per worker
		}
		*spare = out
	}
}

// Extra are the fields meshlet logs after Envoy's default format:
// %RESPONSE_CODE_DETAILS% "%UPSTREAM_TRANSPORT_FAILURE_REASON%"
// %UPSTREAM_CLUSTER% %DOWNSTREAM_PEER_URI_SAN% %UPSTREAM_PEER_URI_SAN%
// %TRACE_ID% (Istio's default format has the first three).
type Extra struct {
	Details, Failure, Cluster    string
	DownstreamPeer, UpstreamPeer string // SPIFFE IDs of mutual-TLS peers
	TraceID                      string // %TRACE_ID% ("": no tracing)
}

// Off reports whether the log writes nothing (access_log.path "off"): a
// caller need not build its entries.
func (a *Logger) Off() bool { return a == nil || a.off }

// Write renders e into worker's buffer.
func (a *Logger) Write(worker int, e *accesslog.Entry, x Extra) {
	if a == nil || a.off {
		return
	}
	sh := a.shards[worker%len(a.shards)]
	sh.mu.Lock()
	if len(sh.buf) >= accessLogBufferMax {
		sh.mu.Unlock()
		a.dropped.Add(1)
		return
	}
	line := sh.buf
	if a.format == config.AccessLogJSON {
		line = append(line, renderJSON(e, x)...)
	} else {
		line = e.AppendDefault(line)
		line = line[:len(line)-1] // drop the newline, append the extra fields
		line = append(line, ' ')
		line = appendDash(line, x.Details)
		line = append(line, ` "`...)
		line = appendDash(line, x.Failure)
		line = append(line, `" `...)
		line = appendDash(line, x.Cluster)
		line = append(line, ' ')
		line = appendDash(line, x.DownstreamPeer)
		line = append(line, ' ')
		line = appendDash(line, x.UpstreamPeer)
		line = append(line, ' ')
		line = appendDash(line, x.TraceID)
		line = append(line, '\n')
	}
	sh.buf = line
	sh.lines++
	full := len(line) >= accessLogFlushAt
	sh.mu.Unlock()
	if full {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

func appendDash(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	return append(b, s...)
}

func renderJSON(e *accesslog.Entry, x Extra) []byte {
	dash := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	m := map[string]any{
		"start_time": e.StartTime.UTC().Format("2006-01-02T15:04:05.000Z"), "method": dash(e.Method), "path": dash(e.Path),
		"protocol": dash(e.Protocol), "response_code": e.ResponseCode, "response_flags": e.Flags.Short(),
		"response_code_details": dash(x.Details), "upstream_transport_failure_reason": dash(x.Failure),
		"downstream_peer_uri_san": dash(x.DownstreamPeer), "upstream_peer_uri_san": dash(x.UpstreamPeer),
		"bytes_received": e.BytesReceived, "bytes_sent": e.BytesSent, "duration": e.Duration.Milliseconds(),
		"x_forwarded_for": dash(e.ForwardedFor), "user_agent": dash(e.UserAgent), "request_id": dash(e.RequestID),
		"authority": dash(e.Authority), "upstream_host": dash(e.UpstreamHost), "upstream_cluster": dash(x.Cluster),
		"trace_id": dash(x.TraceID),
	}
	b, _ := json.Marshal(m)
	return append(b, '\n')
}

// Close writes what is buffered (waiting at most a second for the
// writer) and stops.
func (a *Logger) Close() {
	if a == nil || a.off {
		return
	}
	a.once.Do(func() { close(a.stop) })
	select {
	case <-a.done:
		if a.closer != nil {
			_ = a.closer.Close()
		}
	case <-time.After(time.Second):
	}
}

// Dropped is how many lines were dropped because a worker's buffer was
// full (the writer stalled).
func (a *Logger) Dropped() uint64 { return a.dropped.Load() }

// Written is how many lines were written.
func (a *Logger) Written() uint64 { return a.written.Load() }
