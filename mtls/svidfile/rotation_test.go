package svidfile

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/circuitbreaker"
	"github.com/meshlet-dev/meshlet/mtls"
)

var clientID = spiffeid.RequireFromString("spiffe://cluster.local/ns/prod/sa/client")

// echoApp serves "echo: <line>" on loopback.
func echoApp(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					fmt.Fprintf(c, "echo: %s", line)
				}
			}()
		}
	}()
	return l.Addr().String()
}

// inboundSidecar is a data plane whose STRICT inbound listener serves the
// echo app with the identity in store; it returns the listener's address.
func inboundSidecar(t *testing.T, store *mtls.Store) string {
	t.Helper()
	cfg := &config.Config{
		Node:         config.Node{ID: "web", Cluster: "web"},
		Admin:        "127.0.0.1:0",
		DrainTimeout: time.Second,
		AccessLog:    config.AccessLog{Path: "off"},
		Listeners: []config.Listener{{Name: "inbound", Address: "127.0.0.1:0", Direction: config.Inbound, Protocol: config.ProtocolAuto,
			MTLS:   &config.InboundMTLS{PeerAuthorization: config.PeerAuthorization{Mode: config.MTLSStrict}},
			Routes: []config.Route{{Name: "echo", Cluster: "echo", Timeout: 5 * time.Second}}}},
		Clusters: []config.Cluster{{Name: "echo", LB: lb.DefaultClusterConfig(), ConnectTimeout: time.Second,
			Endpoints:       []lb.Endpoint{{Address: echoApp(t)}},
			CircuitBreakers: circuitbreaker.DefaultThresholds(), Protocol: config.UpstreamHTTP1}},
	}
	s, err := dataplane.New(cfg, dataplane.Options{Workers: 2, Identity: store})
	if err != nil {
		t.Fatalf("dataplane.New: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s.ListenerAddrs()["127.0.0.1:0"]
}

// request is one mTLS connection through the sidecar: a line echoed by the
// app; it returns the serial of the certificate the sidecar presented.
func request(cfg *tls.Config, addr string, n int) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", fmt.Errorf("handshake: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "req %d\n", n); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading the echo: %w", err)
	}
	if want := fmt.Sprintf("echo: req %d\n", n); line != want {
		return "", fmt.Errorf("echo %q, want %q", line, want)
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestRotationUnderLoad rotates the sidecar's identity files several
// times, as the agents write them, while clients keep sending requests:
// none fails, and after each rotation new handshakes present the new
// certificate.
func TestRotationUnderLoad(t *testing.T) {
	for _, layout := range []struct {
		name  string
		write func(testing.TB, string, [3]string, [3][]byte)
	}{{"rename", writeRenamed}, {"projected ..data swap", writeProjected}} {
		t.Run(layout.name, func(t *testing.T) {
			ca := testCA(t)
			dir := t.TempDir()
			names := [3]string{"tls.crt", "tls.key", "ca.crt"} // csi-driver-spiffe's
			put := func(s svid) {
				c, k, b := s.files(t)
				layout.write(t, dir, names, [3][]byte{c, k, b})
			}
			store := mtls.NewStore()
			logs := &logSink{}
			w, err := New(Config{Dir: dir, CertFile: names[0], KeyFile: names[1], BundleFile: names[2], Store: store, Interval: 10 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			go w.Run(ctx)
			first := issue(t, ca, webID, time.Hour)
			put(first)
			if _, err := store.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			addr := inboundSidecar(t, store)

			clientStore := mtls.NewStore()
			cc := issue(t, ca, clientID, time.Hour)
			if _, _, err := clientStore.Update(mtls.Update{Chain: cc.chain, Key: cc.key, Bundles: []*x509bundle.Bundle{ca.Bundle()}}); err != nil {
				t.Fatal(err)
			}
			tlsCfg, err := mtls.ClientConfig(clientStore, mtls.ClientOptions{ServerID: webID, NextProto: mtls.ALPNOpaqueTCP})
			if err != nil {
				t.Fatal(err)
			}

			var (
				stop   = make(chan struct{})
				wg     sync.WaitGroup
				total  atomic.Int64
				mu     sync.Mutex
				failed []error
			)
			for g := range 4 {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := request(tlsCfg, addr, g*1_000_000+i); err != nil {
							mu.Lock()
							failed = append(failed, err)
							mu.Unlock()
						}
						total.Add(1)
					}
				})
			}
			for r := range 4 {
				before := total.Load()
				next := issue(t, ca, webID, time.Hour)
				want := next.chain[0].SerialNumber.String()
				snap := store.Current()
				put(next)
				for serial(snap) != want {
					select {
					case <-snap.Superseded():
						snap = store.Current()
					case <-ctx.Done():
						t.Fatalf("rotation %d: certificate %s not installed", r, want)
					}
				}
				if got, err := request(tlsCfg, addr, -r); err != nil || got != want {
					t.Fatalf("rotation %d: a new handshake presented serial %s (err %v), want the new %s", r, got, err, want)
				}
				// Let the load cross the swap before the next rotation.
				for total.Load() < before+20 && ctx.Err() == nil {
					runtime.Gosched()
				}
			}
			close(stop)
			wg.Wait()
			if strings.Contains(logs.String(), "WARN") {
				t.Errorf("a rotation as the agents write it was warned about:\n%s", logs)
			}
			if len(failed) > 0 {
				t.Fatalf("%d of %d requests failed during rotation; first: %v", len(failed), total.Load(), failed[0])
			}
			t.Logf("%d requests across 4 rotations, none failed", total.Load())
		})
	}
}
