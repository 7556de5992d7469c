package logsink

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/lb/accesslog"
)

func TestDropsWhenWriterBlocks(t *testing.T) {
	// A writer that blocks never stalls requests; overflowing lines are counted.
	block := &blockingWriter{release: make(chan struct{})}
	defer close(block.release)
	al, _ := New(config.AccessLog{Format: config.AccessLogText, FlushInterval: time.Second}, block, 1)
	e := accesslog.Entry{StartTime: time.Now(), Method: "GET", Path: "/", Protocol: "HTTP/1.1", ResponseCode: 200}
	lineLen := len(e.AppendDefault(nil))
	n := 4 * accessLogBufferMax / lineLen
	start := time.Now()
	for range n {
		al.Write(0, &e, Extra{Cluster: "c"})
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("writing to a blocked log took %v", d)
	}
	// The worker's buffer holds accessLogBufferMax bytes, and the writer
	// took at most one such buffer before blocking (it may swap late, with
	// the buffer full): at most half the lines fit; the rest are dropped
	// and counted.
	if al.dropped.Load() < uint64(n/3) {
		t.Errorf("dropped = %d of %d lines, want at least %d", al.dropped.Load(), n, n/3)
	}
}

// TestAccessLogBatches: lines reach the writer in batches, every flush
// interval or once a worker's buffer passes accessLogFlushAt, not with a
// write per line, and all of them arrive, in order.
func TestAccessLogBatches(t *testing.T) {
	var w countingWriter
	al, _ := New(config.AccessLog{Format: config.AccessLogText, FlushInterval: 50 * time.Millisecond}, &w, 2)
	for i := range 1000 {
		e := accesslog.Entry{StartTime: time.Now(), Method: "GET", Path: fmt.Sprintf("/%d", i), Protocol: "HTTP/1.1", ResponseCode: 200}
		al.Write(0, &e, Extra{Cluster: "c"})
	}
	testtool.WaitFor(t, "1000 lines written", func() bool { return al.written.Load() == 1000 })
	if calls := w.calls.Load(); calls > 20 {
		t.Errorf("1000 lines took %d writes, want them batched", calls)
	}
	lines := w.Lines()
	if len(lines) != 1000 || !strings.Contains(lines[0], `"GET /0 `) || !strings.Contains(lines[999], `"GET /999 `) {
		t.Fatalf("%d lines, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
	// A long interval: a buffer past accessLogFlushAt is written at once.
	var w2 countingWriter
	slow, _ := New(config.AccessLog{Format: config.AccessLogText, FlushInterval: time.Hour}, &w2, 1)
	e := accesslog.Entry{StartTime: time.Now(), Method: "GET", Path: "/", Protocol: "HTTP/1.1", ResponseCode: 200}
	n := accessLogFlushAt/len(e.AppendDefault(nil)) + 1
	for range n {
		slow.Write(0, &e, Extra{})
	}
	// (Lines carry meshlet's fields after Envoy's: the buffer passes the
	// mark before the n-th line, and the writer may take it then.)
	testtool.WaitFor(t, "a full buffer written before the interval", func() bool { return slow.written.Load() > 0 })
	slow.Write(0, &e, Extra{})
	slow.Close() // writes the rest
	if got := slow.written.Load(); got != uint64(n)+1 {
		t.Errorf("after close %d lines written, want %d", got, n+1)
	}
	al.Close()
}

// countingWriter records what is written and how many writes it took.
type countingWriter struct {
	testtool.Buffer
	calls atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.calls.Add(1)
	return c.Buffer.Write(p)
}

type blockingWriter struct{ release chan struct{} }

func (b *blockingWriter) Write(p []byte) (int, error) { <-b.release; return len(p), nil }
