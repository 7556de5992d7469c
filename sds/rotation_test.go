package sds_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/mtls"
	"github.com/meshlet-dev/meshlet/sds"
)

// echoTLS serves mutual TLS from store on loopback and echoes lines.
func echoTLS(t *testing.T, store *mtls.Store) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", mtls.ServerConfig(store, mtls.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	conns := map[net.Conn]bool{}
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes one line and reads the echo.
func roundTrip(c net.Conn, r *bufio.Reader, msg string) error {
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
		return err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg+"\n" {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

// certLog records every certificate a store publishes.
type certLog struct {
	mu    sync.Mutex
	certs []*x509.Certificate
}

func watchCerts(t *testing.T, s *mtls.Store) *certLog {
	l := &certLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		var last *x509.Certificate
		for {
			snap := s.Current()
			if c := snap.Certificate; c != nil && (last == nil || !c.Leaf.Equal(last)) {
				last = c.Leaf
				l.mu.Lock()
				l.certs = append(l.certs, last)
				l.mu.Unlock()
			}
			select {
			case <-snap.Superseded():
			case <-ctx.Done():
				return
			}
		}
	}()
	return l
}

func (l *certLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.certs)
}

// TestRotationUnderHandshakes: with 2-second certificates both workloads
// renew again and again (a fresh key each time) while a TLS server using the
// store keeps accepting new handshakes and one long-lived connection carries
// traffic throughout.
func TestRotationUnderHandshakes(t *testing.T) {
	ca := newTestCA(t)
	cp := startControlPlane(t, ca, 2*time.Second, "127.0.0.1:0")
	srvStore, cliStore := mtls.NewStore(), mtls.NewStore()
	for _, w := range []struct {
		store *mtls.Store
		token string
		id    spiffeid.ID
	}{{srvStore, "web-token", webID}, {cliStore, "db-token", dbID}} {
		c := newClient(t, sds.ClientConfig{Target: cp.addr, TLS: clientTLS(ca), Token: staticToken(w.token),
			ID: w.id, Store: w.store, CheckInterval: 100 * time.Millisecond})
		runClient(t, c)
	}
	srvCerts, cliCerts := watchCerts(t, srvStore), watchCerts(t, cliStore)
	waitReady(t, srvStore)
	waitReady(t, cliStore)

	addr := echoTLS(t, srvStore)
	cfg, err := mtls.ClientConfig(cliStore, mtls.ClientOptions{ServerID: webID, NextProto: mtls.ALPNOpaqueTCP})
	if err != nil {
		t.Fatal(err)
	}
	long, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	longR := bufio.NewReader(long)

	const wantRotations = 5
	var (
		handshakes, failures atomic.Int64
		firstErr             atomic.Value
		stop                 = make(chan struct{})
		wg                   sync.WaitGroup
	)
	fail := func(err error) {
		failures.Add(1)
		firstErr.CompareAndSwap(nil, err)
	}
	wg.Add(2)
	go func() { // new connections all the time
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
			if err != nil {
				fail(fmt.Errorf("handshake %d: %w", i, err))
				continue
			}
			if err := roundTrip(c, bufio.NewReader(c), fmt.Sprintf("short %d", i)); err != nil {
				fail(fmt.Errorf("request on connection %d: %w", i, err))
			}
			c.Close()
			handshakes.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	go func() { // the long-lived connection
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if err := roundTrip(long, longR, fmt.Sprintf("long %d", i)); err != nil {
				fail(fmt.Errorf("long-lived connection, message %d: %w", i, err))
				return
			}
		}
	}()
	eventually(t, fmt.Sprintf("%d rotations on both sides", wantRotations), func() bool {
		return srvCerts.count() > wantRotations && cliCerts.count() > wantRotations || failures.Load() > 0
	})
	close(stop)
	wg.Wait()
	if err := roundTrip(long, longR, "still there"); err != nil {
		fail(fmt.Errorf("long-lived connection after the rotations: %w", err))
	}
	t.Logf("%d handshakes, server certificates %d, client certificates %d", handshakes.Load(), srvCerts.count(), cliCerts.count())
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d failures; first: %v", n, firstErr.Load())
	}
	if handshakes.Load() < wantRotations {
		t.Errorf("only %d handshakes during the rotations", handshakes.Load())
	}
	for _, l := range []*certLog{srvCerts, cliCerts} {
		keys := map[string]bool{}
		for _, c := range l.certs {
			der, err := x509.MarshalPKIXPublicKey(c.PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			k := string(der)
			if keys[k] {
				t.Fatalf("a renewal reused a key (certificate serial %x)", c.SerialNumber)
			}
			keys[k] = true
		}
	}
}
