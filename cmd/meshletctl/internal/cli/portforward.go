package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// forward opens a port-forward from a loopback port to port of pod
// ns/name through the API server (websocket, falling back to SPDY, as
// kubectl port-forward), and returns a fetch of that port's HTTP paths
// and the forward's stop.
func (k *kube) forward(ctx context.Context, ns, name string, port int) (fetch func(method, path string) ([]byte, error), stop func(), err error) {
	u := k.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(k.cfg)
	if err != nil {
		return nil, nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, k.cfg); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	stopCh, ready := make(chan struct{}), make(chan struct{})
	errOut := &lockedBuffer{}
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stopCh, ready, io.Discard, errOut)
	if err != nil {
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return nil, nil, fmt.Errorf("port-forward to pod %s/%s port %d: %v %s", ns, name, port, err, strings.TrimSpace(errOut.String()))
	case <-ctx.Done():
		close(stopCh)
		return nil, nil, fmt.Errorf("port-forward to pod %s/%s port %d: %w", ns, name, port, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		close(stopCh)
		return nil, nil, fmt.Errorf("port-forward to pod %s/%s port %d: no local port: %v", ns, name, port, err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0].Local)
	get := httpFetch(ctx, base)
	// What the forward itself reports (the pod refused the port) is the
	// reason a fetch through it failed.
	fetch = func(method, path string) ([]byte, error) {
		b, err := get(method, path)
		if err != nil {
			if msg := strings.TrimSpace(errOut.String()); msg != "" {
				err = fmt.Errorf("%w (port-forward to pod %s/%s port %d: %s)", err, ns, name, port, msg)
			}
		}
		return b, err
	}
	var once sync.Once
	return fetch, func() {
		once.Do(func() {
			close(stopCh)
			<-done
		})
	}, nil
}

// lockedBuffer is the forward's error output, written by its goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// httpFetch returns a fetch of base's paths (an error unless 200).
func httpFetch(ctx context.Context, base string) func(method, path string) ([]byte, error) {
	c := &http.Client{Timeout: 20 * time.Second}
	return func(method, path string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
		}
		return b, nil
	}
}
