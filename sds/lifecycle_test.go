package sds_test

import (
	"crypto/tls"
	"crypto/x509"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/mtls"
	"github.com/meshlet-dev/meshlet/sds"
)

// TestBundlePushedToOpenStream: a bundle change reaches a connected client
// on its open stream (no new stream), in both ROOTCA shapes the server uses.
func TestBundlePushedToOpenStream(t *testing.T) {
	ca := newTestCA(t)
	cp := startControlPlane(t, ca, time.Hour, "127.0.0.1:0")
	store := mtls.NewStore()
	c := newClient(t, sds.ClientConfig{Target: cp.addr, TLS: clientTLS(ca), Token: staticToken("web-token"), ID: webID, Store: store})
	runClient(t, c)
	waitReady(t, store)
	streams := c.Streams()
	cert := store.Current().Certificate

	// A second root for the mesh, as during a CA rotation: plain trusted_ca.
	next := newTestCA(t)
	both := x509bundle.FromX509Authorities(ca.TrustDomain(), append(ca.Bundle().X509Authorities(), next.Root()))
	if err := cp.srv.SetBundles(both); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the two-root bundle", func() bool {
		b, err := store.Current().GetX509BundleForTrustDomain(ca.TrustDomain())
		return err == nil && b.HasX509Authority(next.Root()) && b.HasX509Authority(ca.Root())
	})

	// A federated trust domain: the SPIFFE-validator shape.
	partner := spiffeid.RequireTrustDomainFromString("partner.example")
	partnerRoot := newTestCA(t).Root()
	if err := cp.srv.SetBundles(ca.Bundle(), x509bundle.FromX509Authorities(partner, []*x509.Certificate{partnerRoot})); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the federated bundle", func() bool {
		tds := store.Current().TrustDomains()
		return len(tds) == 2 && tds[0] == "cluster.local" && tds[1] == "partner.example"
	})
	if c.Streams() != streams {
		t.Errorf("the client opened %d new streams; the bundle should arrive on the open one", c.Streams()-streams)
	}
	if !store.Current().Certificate.Leaf.Equal(cert.Leaf) {
		t.Error("a bundle push replaced the certificate")
	}
}

// TestServerDownKeepsCertificateAndReconnects: while the SDS server is gone
// the store keeps its certificate and TLS keeps working; the client retries
// with growing, jittered back-off and picks up a new certificate when the
// server returns on the same address.
func TestServerDownKeepsCertificateAndReconnects(t *testing.T) {
	ca := newTestCA(t)
	cp := startControlPlane(t, ca, time.Hour, "127.0.0.1:0")
	store := mtls.NewStore()
	const initial, maxBackoff = 100 * time.Millisecond, 800 * time.Millisecond
	c := newClient(t, sds.ClientConfig{Target: cp.addr, TLS: clientTLS(ca), Token: staticToken("web-token"), ID: webID, Store: store,
		InitialBackoff: initial, MaxBackoff: maxBackoff})
	var (
		mu       sync.Mutex
		openings []time.Time
	)
	sds.SetStreamHook(c, func() {
		mu.Lock()
		openings = append(openings, time.Now())
		mu.Unlock()
	})
	runClient(t, c)
	before := waitReady(t, store)
	addr := echoTLS(t, store)
	peerStore := mtls.NewStore()
	peer := newClient(t, sds.ClientConfig{Target: cp.addr, TLS: clientTLS(ca), Token: staticToken("db-token"), ID: dbID, Store: peerStore})
	runClient(t, peer)
	waitReady(t, peerStore)
	peerCfg, _ := mtls.ClientConfig(peerStore, mtls.ClientOptions{ServerID: webID})

	cp.stop()
	stoppedAt := c.Streams()
	eventually(t, "six reconnection attempts", func() bool { return c.Streams() >= stoppedAt+6 })
	if snap := store.Current(); snap != before {
		t.Fatalf("the store changed while the server was down (version %d -> %d)", before.Version, snap.Version)
	}
	conn, err := tls.Dial("tcp", addr, peerCfg)
	if err != nil {
		t.Fatalf("handshake with the kept certificate while SDS is down: %v", err)
	}
	conn.Close()
	if s := c.SecondsUntilExpiry(); s <= 0 {
		t.Fatalf("SecondsUntilExpiry %v", s)
	}

	mu.Lock()
	attempts := append([]time.Time(nil), openings[stoppedAt:]...)
	mu.Unlock()
	var longest time.Duration
	for i := 1; i < len(attempts); i++ {
		gap := attempts[i].Sub(attempts[i-1])
		if gap < initial/2 {
			t.Errorf("retry %d came %v after the previous one; the back-off floor is %v", i, gap, initial/2)
		}
		longest = max(longest, gap)
	}
	// After five doublings the back-off is at its cap; jitter keeps at least half.
	if longest < maxBackoff/2 {
		t.Errorf("the longest gap between retries is %v; the back-off did not grow toward %v", longest, maxBackoff)
	}

	startControlPlane(t, ca, time.Hour, cp.addr)
	eventually(t, "a certificate from the restarted server", func() bool {
		return store.Current().Certificate != nil && !store.Current().Certificate.Leaf.Equal(before.Certificate.Leaf)
	})
}

// TestWallClockJumpRenews: a machine suspended past the renewal time wakes
// with its timers not having advanced; the periodic wall-clock check renews
// at once. The client's clock jumps 40 minutes ahead on a 1-hour certificate
// whose renewal timer is ~30 real minutes away.
func TestWallClockJumpRenews(t *testing.T) {
	ca := newTestCA(t)
	cp := startControlPlane(t, ca, time.Hour, "127.0.0.1:0")
	store := mtls.NewStore()
	var skew, reads atomic.Int64
	c := newClient(t, sds.ClientConfig{Target: cp.addr, TLS: clientTLS(ca), Token: staticToken("web-token"), ID: webID, Store: store,
		CheckInterval: 100 * time.Millisecond, Now: func() time.Time {
			reads.Add(1)
			return time.Now().Add(time.Duration(skew.Load()))
		}})
	runClient(t, c)
	first := waitReady(t, store).Certificate.Leaf
	// A few checks, each a read of the clock: nothing is due. A check
	// that found it due would end the stream, and the renewal would open
	// another before reading the clock again.
	streams, before := c.Streams(), reads.Load()
	eventually(t, "a few wall-clock checks", func() bool { return reads.Load() >= before+3 })
	if c.Streams() != streams || !store.Current().Certificate.Leaf.Equal(first) {
		t.Fatalf("renewed before anything was due (streams %d -> %d)", streams, c.Streams())
	}
	skew.Store(int64(40 * time.Minute))
	eventually(t, "renewal after the clock jump", func() bool { return !store.Current().Certificate.Leaf.Equal(first) })
	if c.RenewalTime().Before(time.Now().Add(40 * time.Minute)) {
		t.Errorf("the new certificate is due at %v, already past on the jumped clock", c.RenewalTime())
	}
}
