package injector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// signalHandler is a slog handler that closes a channel when a record
// with the given message is logged: the test waits on the control
// plane's own event, not on time.
type signalHandler struct {
	slog.Handler
	msg  string
	seen chan struct{}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case <-h.seen:
		default:
			close(h.seen)
		}
	}
	return nil
}

// With ShutdownDelay, a stopping control plane keeps answering the
// webhook (what kube-proxy may still send it while its endpoint is
// removed), also on a keep-alive connection opened before the stop (it
// must not be closed under a client about to send on it), each answer
// closing its connection so the client's next request dials again (and
// reaches another replica); it stops listening only after the delay.
// Against the fake clientset: nothing here needs an API server beyond the
// CA Secret.
func TestShutdownDelayKeepsServing(t *testing.T) {
	const delay = 2 * time.Second
	stopping := &signalHandler{Handler: slog.DiscardHandler, msg: "stopping: serving on while the endpoints update", seen: make(chan struct{})}
	opts := DefaultOptions()
	opts.WebhookAddr, opts.GRPCAddr, opts.MonitoringAddr, opts.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	opts.ShutdownDelay, opts.Logger = delay, slog.New(stopping)
	s := New(fake.NewClientset(), opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	addr := s.Addrs()["webhook"]
	if addr == "" {
		t.Fatalf("Run failed before serving: %v", <-done)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.RootPEM())
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "meshlet-injector.meshlet-system.svc"}}}
	// get makes a request and says whether it went over a connection
	// kept from an earlier one.
	get := func() (resp *http.Response, reused bool, err error) {
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, "https://"+addr+"/inject", nil)
		resp, err = client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, reused, err
	}
	if resp, _, err := get(); err != nil || resp.Close {
		t.Fatalf("before the stop: %v (connection close %v)", err, resp != nil && resp.Close)
	}

	cancel()
	stopAt := time.Now()
	select {
	case <-stopping.seen:
	case err := <-done:
		t.Fatalf("Run returned without the delay: %v", err)
	}
	resp, reused, err := get()
	if err != nil {
		t.Fatalf("during the shutdown delay the webhook failed a request on the connection kept from before the stop: %v", err)
	}
	if !reused {
		t.Errorf("during the shutdown delay the connection kept from before the stop was gone (closed idle)")
	}
	if !resp.Close {
		t.Errorf("during the shutdown delay an answer kept its connection open")
	}
	if _, reused, err := get(); err != nil || reused {
		t.Errorf("during the shutdown delay, the request after a closing answer: %v (over a kept connection: %v), want it answered on a new one", err, reused)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(stopAt); took < delay {
		t.Errorf("Run returned %v after its context ended, before the %v delay", took, delay)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("the webhook still listens on %s after Run returned", addr)
	}
}
