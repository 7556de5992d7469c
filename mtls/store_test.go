package mtls

import (
	"context"
	"crypto/x509"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
)

func TestStoreUpdate(t *testing.T) {
	ca := testCA(t, "cluster.local", false, 0)
	web := mustID(t, "spiffe://cluster.local/ns/default/sa/web")
	chain, key := issue(t, ca, web, time.Hour)
	_, otherKey := issue(t, ca, web, time.Hour)

	s := NewStore()
	if s.Current().Ready() || s.Current().Version != 0 {
		t.Fatal("a new store is not empty")
	}
	if err := s.SetCertificate(chain, otherKey); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("mismatched key: %v", err)
	}
	if err := s.SetCertificate(chain[:0], key); err == nil {
		t.Error("empty chain accepted")
	}
	noID := *chain[0]
	noID.URIs = nil
	if err := s.SetCertificate([]*x509.Certificate{&noID}, key); err == nil || !strings.Contains(err.Error(), "no URI SAN") {
		t.Errorf("leaf without SPIFFE ID: %v", err)
	}
	if err := s.SetBundles(); err == nil {
		t.Error("empty bundle list accepted")
	}
	if err := s.SetBundles(ca.Bundle(), ca.Bundle()); err == nil || !strings.Contains(err.Error(), "two trust bundles") {
		t.Errorf("duplicate trust domain: %v", err)
	}
	if s.Current().Version != 0 {
		t.Fatal("a refused update changed the store")
	}

	first := s.Current()
	if err := s.SetCertificate(chain, key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Superseded():
	default:
		t.Fatal("the replaced snapshot was not marked superseded")
	}
	snap := s.Current()
	if snap.ID != web || snap.Version != 1 || snap.Ready() {
		t.Fatalf("after the certificate: id %v version %d ready %v", snap.ID, snap.Version, snap.Ready())
	}
	if err := s.SetBundles(ca.Bundle()); err != nil {
		t.Fatal(err)
	}
	if !s.Current().Ready() || s.Current().Version != 2 {
		t.Fatal("certificate + bundle is not ready")
	}
	// Re-delivering the same content publishes nothing.
	if _, changed, err := s.Update(Update{Chain: chain, Key: key, Bundles: []*x509bundle.Bundle{ca.Bundle()}}); err != nil || changed || s.Current().Version != 2 {
		t.Fatalf("identical update: changed=%v err=%v version=%d", changed, err, s.Current().Version)
	}
}

func TestStoreWaitReady(t *testing.T) {
	ca := testCA(t, "cluster.local", false, 0)
	s := NewStore()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.WaitReady(ctx); err == nil || !strings.Contains(err.Error(), "have certificate: false") {
		t.Fatalf("WaitReady on an empty store: %v", err)
	}
	chain, key := issue(t, ca, mustID(t, "spiffe://cluster.local/ns/a/sa/b"), time.Hour)
	go func() {
		s.Update(Update{Chain: chain, Key: key, Bundles: []*x509bundle.Bundle{ca.Bundle()}})
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStoreSwapUnderConcurrentHandshakes rotates the server's certificate
// (and its trust bundle) while clients handshake in parallel: every handshake
// must succeed and see a certificate and bundle that belong together.
func TestStoreSwapUnderConcurrentHandshakes(t *testing.T) {
	ca := testCA(t, "cluster.local", false, 0)
	extra := testCA(t, "cluster.local", false, 0) // a second root, as during CA rotation
	srvID := mustID(t, "spiffe://cluster.local/ns/default/sa/server")
	cliID := mustID(t, "spiffe://cluster.local/ns/default/sa/client")
	srvStore := storeFor(t, ca, srvID, time.Hour)
	cliStore := storeFor(t, ca, cliID, time.Hour)
	addr, results := tlsServer(t, ServerConfig(srvStore, ServerOptions{}))
	go func() {
		for r := range results {
			if r.conn != nil {
				r.conn.Close()
			}
		}
	}()

	stop := make(chan struct{})
	var rotations atomic.Int64
	rotatorDone := make(chan struct{})
	go func() {
		defer close(rotatorDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			chain, key, err := issueE(ca, srvID, time.Hour)
			if err != nil {
				t.Error(err)
				return
			}
			bundles := []*x509bundle.Bundle{ca.Bundle()}
			if i%2 == 1 {
				bundles = []*x509bundle.Bundle{x509bundle.FromX509Authorities(ca.TrustDomain(), append(ca.Bundle().X509Authorities(), extra.Root()))}
			}
			if _, _, err := srvStore.Update(Update{Chain: chain, Key: key, Bundles: bundles}); err != nil {
				t.Error(err)
				return
			}
			rotations.Add(1)
		}
	}()

	cfg, err := ClientConfig(cliStore, ClientOptions{ServerID: srvID, NextProto: ALPNHTTP2})
	if err != nil {
		t.Fatal(err)
	}
	const clients, perClient = 8, 40
	var (
		wg      sync.WaitGroup
		serials sync.Map
		failed  atomic.Int64
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perClient {
				c, err := dial(addr, cfg)
				if err != nil {
					failed.Add(1)
					t.Errorf("handshake during rotation: %v", err)
					return
				}
				serials.Store(c.ConnectionState().PeerCertificates[0].SerialNumber.String(), true)
				c.Close()
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-rotatorDone
	n := 0
	serials.Range(func(any, any) bool { n++; return true })
	t.Logf("%d handshakes, %d rotations, %d distinct server certificates seen", clients*perClient, rotations.Load(), n)
	if failed.Load() != 0 {
		t.Fatalf("%d handshakes failed", failed.Load())
	}
	if n < 2 {
		t.Errorf("clients saw %d distinct server certificates; the rotation was not observed", n)
	}
}
