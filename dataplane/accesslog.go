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
// its own goroutine, so a slow stdout never stalls traffic; lines that do
// not fit the queue are dropped and counted.
type accessLogger struct {
	format  config.AccessLogFormat
	lines   chan []byte
	dropped atomic.Uint64
	written atomic.Uint64
	off     bool
	closer  io.Closer
	stop    chan struct{} // never closes lines: late writers must not panic
	done    chan struct{}
	once    sync.Once
}

const accessLogQueue = 16384

func newAccessLogger(cfg config.AccessLog, override io.Writer) (*accessLogger, error) {
	a := &accessLogger{format: cfg.Format, lines: make(chan []byte, accessLogQueue), stop: make(chan struct{}), done: make(chan struct{})}
	if a.format == "" {
		a.format = config.AccessLogText
	}
	var w io.Writer
	switch {
	case override != nil:
		w = override
	case cfg.Path == "off":
		a.off = true
		close(a.done)
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
	go a.run(w)
	return a, nil
}

func (a *accessLogger) run(w io.Writer) {
	defer close(a.done)
	bw := bufio.NewWriterSize(w, 64<<10)
	put := func(line []byte) {
		_, _ = bw.Write(line)
		a.written.Add(1)
		if len(a.lines) == 0 {
			_ = bw.Flush()
		}
	}
	for {
		select {
		case line := <-a.lines:
			put(line)
			continue
		case <-a.stop:
		}
		break
	}
	for len(a.lines) > 0 {
		put(<-a.lines)
	}
	_ = bw.Flush()
	if a.closer != nil {
		_ = a.closer.Close()
	}
}

// write renders e and queues it.
func (a *accessLogger) write(e *lb.AccessLogEntry, details, failure, cluster string) {
	if a == nil || a.off {
		return
	}
	var line []byte
	if a.format == config.AccessLogJSON {
		line = renderJSON(e, details, failure, cluster)
	} else {
		line = e.AppendDefault(make([]byte, 0, 384))
		line = line[:len(line)-1] // drop the newline, append the extra fields
		line = append(line, ' ')
		line = appendDash(line, details)
		line = append(line, ` "`...)
		line = appendDash(line, failure)
		line = append(line, `" `...)
		line = appendDash(line, cluster)
		line = append(line, '\n')
	}
	select {
	case a.lines <- line:
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

func renderJSON(e *lb.AccessLogEntry, details, failure, cluster string) []byte {
	dash := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	m := map[string]any{
		"start_time": e.StartTime.UTC().Format("2006-01-02T15:04:05.000Z"), "method": dash(e.Method), "path": dash(e.Path),
		"protocol": dash(e.Protocol), "response_code": e.ResponseCode, "response_flags": e.Flags.Short(),
		"response_code_details": dash(details), "upstream_transport_failure_reason": dash(failure),
		"bytes_received": e.BytesReceived, "bytes_sent": e.BytesSent, "duration": e.Duration.Milliseconds(),
		"x_forwarded_for": dash(e.ForwardedFor), "user_agent": dash(e.UserAgent), "request_id": dash(e.RequestID),
		"authority": dash(e.Authority), "upstream_host": dash(e.UpstreamHost), "upstream_cluster": dash(cluster),
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
	select {
	case <-a.done:
	case <-time.After(time.Second):
	}
}
