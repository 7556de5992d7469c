package mtls

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// testCA generates a CA for td whose clock is now() + skew (skew lets a test
// issue certificates that are already expired or not yet valid).
func testCA(t testing.TB, td string, intermediate bool, skew time.Duration) *CA {
	t.Helper()
	trust := spiffeid.RequireTrustDomainFromString(td)
	clock := func() time.Time { return time.Now().Add(skew) }
	m, err := GenerateCAMaterial(CAOptions{TrustDomain: trust, Intermediate: intermediate, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := NewCA(trust, m, clock)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue signs a fresh key's CSR for id.
func issue(t testing.TB, ca *CA, id spiffeid.ID, ttl time.Duration) ([]*x509.Certificate, crypto.Signer) {
	t.Helper()
	chain, key, err := issueE(ca, id, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return chain, key
}

// issueE is issue for goroutines other than the test's.
func issueE(ca *CA, id spiffeid.ID, ttl time.Duration) ([]*x509.Certificate, crypto.Signer, error) {
	key, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	csrPEM, err := NewCSR(key, id)
	if err != nil {
		return nil, nil, err
	}
	csr, err := ParseCSR(csrPEM)
	if err != nil {
		return nil, nil, err
	}
	chain, err := ca.SignCSR(csr, id, ttl)
	return chain, key, err
}

// storeFor returns a store holding a certificate for id issued by ca and the
// bundle of trusted.
func storeFor(t testing.TB, ca *CA, id spiffeid.ID, ttl time.Duration, trusted ...*CA) *Store {
	t.Helper()
	s := NewStore()
	chain, key := issue(t, ca, id, ttl)
	if len(trusted) == 0 {
		trusted = []*CA{ca}
	}
	u := Update{Chain: chain, Key: key}
	for _, tc := range trusted {
		u.Bundles = append(u.Bundles, tc.Bundle())
	}
	if _, _, err := s.Update(u); err != nil {
		t.Fatal(err)
	}
	return s
}

func mustID(t testing.TB, s string) spiffeid.ID {
	t.Helper()
	id, err := spiffeid.FromString(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// handshakeResult is what the server side of a test connection saw.
type handshakeResult struct {
	state tls.ConnectionState
	err   error
	conn  *tls.Conn
}

// tlsServer accepts TLS connections with cfg on loopback and reports each
// handshake's outcome on the returned channel. Successful connections get
// "OK <peer id>\n" written back and stay open until the client closes.
func tlsServer(t testing.TB, cfg *tls.Config) (addr string, results <-chan handshakeResult) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan handshakeResult, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				tc := tls.Server(c, cfg)
				tc.SetDeadline(time.Now().Add(20 * time.Second))
				err := tc.Handshake()
				if err != nil {
					ch <- handshakeResult{err: err}
					tc.Close()
					return
				}
				tc.SetDeadline(time.Time{})
				st := tc.ConnectionState()
				id, _ := PeerID(st)
				if _, err := tc.Write([]byte("OK " + id.String() + "\n")); err != nil {
					ch <- handshakeResult{err: err}
					tc.Close()
					return
				}
				ch <- handshakeResult{state: st, conn: tc}
				// Echo until the client goes away.
				buf := make([]byte, 4096)
				for {
					n, err := tc.Read(buf)
					if err != nil {
						tc.Close()
						return
					}
					if _, err := tc.Write(buf[:n]); err != nil {
						tc.Close()
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), ch
}

// dial opens a TLS connection and reads the server's "OK" line, so that in
// TLS 1.3 a refusal of the client certificate (sent after the client's
// Finished) surfaces as the client's error.
func dial(addr string, cfg *tls.Config) (*tls.Conn, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if err != nil {
		c.Close()
		return nil, err
	}
	if n < 3 || string(buf[:3]) != "OK " {
		c.Close()
		return nil, errors.New("unexpected greeting " + string(buf[:n]))
	}
	c.SetReadDeadline(time.Time{})
	return c, nil
}

func waitResult(t testing.TB, ch <-chan handshakeResult) handshakeResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no handshake result from the server within 30s")
	}
	return handshakeResult{}
}
