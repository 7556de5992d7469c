package dataplane

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane/config"
	"github.com/meshlet-dev/meshlet/lb"
)

// accessLogger renders lines on the request goroutine and writes them from
// other goroutines, so a slow stdout never stalls traffic; lines that do not
// fit a queue are dropped and counted. Each worker has its own queue (so
// logging takes no lock shared between workers); one goroutine per queue
// writes into the shared, mutex-guarded buffer, off the request path.
type accessLogger struct {
	format  config.AccessLogFormat
	queues  []chan []byte
	dropped atomic.Uint64
	written atomic.Uint64
	off     bool
	closer  io.Closer
	mu      sync.Mutex // guards bw, between the drain goroutines
	bw      *bufio.Writer
	stop    chan struct{} // queues are never closed: late writers must not panic
	done    sync.WaitGroup
	once    sync.Once
}

// accessLogQueue is the capacity of each worker's queue: at 30,000
// requests per second on a worker it rides out a 130 ms stall of the log
// writer; each slot costs 24 bytes whether used or not.
const accessLogQueue = 4096

func newAccessLogger(cfg config.AccessLog, override io.Writer, workers int) (*accessLogger, error) {
	a := &accessLogger{format: cfg.Format, stop: make(chan struct{})}
	if a.format == "" {
		a.format = config.AccessLogText
	}
	var w io.Writer
	switch {
	case override != nil:
		w = override
	case cfg.Path == "off":
		a.off = true
		return a, nil
	case cfg.Path == "" || cfg.Path == "-":
		w = os.Stdout
	default:
		f, err := os.OpenFile(cfg.Path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("dataplane: access_log.path: %w", err)
		}
		w, a.closer = f, f
	}
	a.bw = bufio.NewWriterSize(w, 64<<10)
	for range max(workers, 1) {
		q := make(chan []byte, accessLogQueue)
		a.queues = append(a.queues, q)
		a.done.Add(1)
		go a.drain(q)
	}
	return a, nil
}

func (a *accessLogger) drain(q chan []byte) {
	defer a.done.Done()
	put := func(line []byte) {
		a.mu.Lock()
		_, _ = a.bw.Write(line)
		if len(q) == 0 {
			_ = a.bw.Flush()
		}
		a.mu.Unlock()
		a.written.Add(1)
	}
	for {
		select {
		case line := <-q:
			put(line)
			continue
		case <-a.stop:
		}
		break
	}
	for len(q) > 0 {
		put(<-q)
	}
	a.mu.Lock()
	_ = a.bw.Flush()
	a.mu.Unlock()
}

// logExtra are the fields meshlet logs after Envoy's default format:
// %RESPONSE_CODE_DETAILS% "%UPSTREAM_TRANSPORT_FAILURE_REASON%"
// %UPSTREAM_CLUSTER% %DOWNSTREAM_PEER_URI_SAN% %UPSTREAM_PEER_URI_SAN%
// (Istio's default format has the first three).
type logExtra struct {
	details, failure, cluster    string
	downstreamPeer, upstreamPeer string // SPIFFE IDs of mutual-TLS peers
}

// write renders e and queues it on worker's queue.
func (a *accessLogger) write(worker int, e *lb.AccessLogEntry, x logExtra) {
	if a == nil || a.off {
		return
	}
	var line []byte
	if a.format == config.AccessLogJSON {
		line = renderJSON(e, x)
	} else {
		line = e.AppendDefault(make([]byte, 0, 384))
		line = line[:len(line)-1] // drop the newline, append the extra fields
		line = append(line, ' ')
		line = appendDash(line, x.details)
		line = append(line, ` "`...)
		line = appendDash(line, x.failure)
		line = append(line, `" `...)
		line = appendDash(line, x.cluster)
		line = append(line, ' ')
		line = appendDash(line, x.downstreamPeer)
		line = append(line, ' ')
		line = appendDash(line, x.upstreamPeer)
		line = append(line, '\n')
	}
	select {
	case a.queues[worker%len(a.queues)] <- line:
	default:
		a.dropped.Add(1)
	}
}

func appendDash(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	return append(b, s...)
}

func renderJSON(e *lb.AccessLogEntry, x logExtra) []byte {
	dash := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	m := map[string]any{
		"start_time": e.StartTime.UTC().Format("2006-01-02T15:04:05.000Z"), "method": dash(e.Method), "path": dash(e.Path),
		"protocol": dash(e.Protocol), "response_code": e.ResponseCode, "response_flags": e.Flags.Short(),
		"response_code_details": dash(x.details), "upstream_transport_failure_reason": dash(x.failure),
		"downstream_peer_uri_san": dash(x.downstreamPeer), "upstream_peer_uri_san": dash(x.upstreamPeer),
		"bytes_received": e.BytesReceived, "bytes_sent": e.BytesSent, "duration": e.Duration.Milliseconds(),
		"x_forwarded_for": dash(e.ForwardedFor), "user_agent": dash(e.UserAgent), "request_id": dash(e.RequestID),
		"authority": dash(e.Authority), "upstream_host": dash(e.UpstreamHost), "upstream_cluster": dash(x.cluster),
	}
	b, _ := json.Marshal(m)
	return append(b, '\n')
}

// close flushes what is queued (waiting at most a second) and stops.
func (a *accessLogger) close() {
	if a == nil || a.off {
		return
	}
	a.once.Do(func() { close(a.stop) })
	done := make(chan struct{})
	go func() { a.done.Wait(); close(done) }()
	select {
	case <-done:
		if a.closer != nil {
			_ = a.closer.Close()
		}
	case <-time.After(time.Second):
	}
}
