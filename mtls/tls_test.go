package mtls

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// testMesh is a trust domain with a CA whose material is three days old, so
// the same CA can also sign with a clock in the past (expired certificates)
// or the future (not yet valid ones).
type testMesh struct {
	ca, past, future *CA
	other            *CA // another CA of the same trust domain
	foreign          *CA // a CA of example.org
}

func newTestMesh(t testing.TB) *testMesh {
	t.Helper()
	td := spiffeid.RequireTrustDomainFromString("cluster.local")
	m, err := GenerateCAMaterial(CAOptions{TrustDomain: td, Now: func() time.Time { return time.Now().Add(-72 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	at := func(skew time.Duration) *CA {
		ca, err := NewCA(td, m, func() time.Time { return time.Now().Add(skew) })
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	return &testMesh{
		ca: at(0), past: at(-48 * time.Hour), future: at(time.Hour),
		other:   testCA(t, "cluster.local", false, 0),
		foreign: testCA(t, "example.org", false, 0),
	}
}

// rawClient presents chain/key (or nothing) and does not verify the server,
// like an arbitrary TLS client would.
func rawClient(chain []*x509.Certificate, key any, alpn string) *tls.Config {
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	if alpn != "" {
		cfg.NextProtos = []string{alpn}
	}
	if chain != nil {
		c := tls.Certificate{PrivateKey: key, Leaf: chain[0]}
		for _, x := range chain {
			c.Certificate = append(c.Certificate, x.Raw)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

func TestServerAcceptsAndRefuses(t *testing.T) {
	m := newTestMesh(t)
	srvID := mustID(t, "spiffe://cluster.local/ns/prod/sa/server")
	goodID := mustID(t, "spiffe://cluster.local/ns/prod/sa/client")
	devID := mustID(t, "spiffe://cluster.local/ns/dev/sa/client")
	srvStore := storeFor(t, m.ca, srvID, time.Hour)
	policies := &PortPolicies{Default: Policy{Namespaces: []string{"prod"}}}
	addr, results := tlsServer(t, ServerConfig(srvStore, ServerOptions{Authorize: policies.Authorize}))
	_, port, _ := net.SplitHostPort(addr)

	t.Run("right peer, both ALPN protocols", func(t *testing.T) {
		for _, proto := range []string{ALPNHTTP2, ALPNOpaqueTCP} {
			cfg, err := ClientConfig(storeFor(t, m.ca, goodID, time.Hour), ClientOptions{ServerID: srvID, NextProto: proto})
			if err != nil {
				t.Fatal(err)
			}
			c, err := dial(addr, cfg)
			if err != nil {
				t.Fatalf("%s: %v", proto, err)
			}
			r := waitResult(t, results)
			if r.err != nil {
				t.Fatalf("server: %v", r.err)
			}
			if id, _ := PeerID(r.state); id != goodID {
				t.Errorf("server saw peer %v, want %v", id, goodID)
			}
			if id, _ := PeerID(c.ConnectionState()); id != srvID {
				t.Errorf("client saw server %v, want %v", id, srvID)
			}
			if r.state.NegotiatedProtocol != proto || c.ConnectionState().NegotiatedProtocol != proto {
				t.Errorf("ALPN: server %q client %q, want %q", r.state.NegotiatedProtocol, c.ConnectionState().NegotiatedProtocol, proto)
			}
			if r.state.Version != tls.VersionTLS13 {
				t.Errorf("TLS version %x, want 1.3", r.state.Version)
			}
			c.Close()
		}
	})

	expired, expiredKey := issue(t, m.past, goodID, time.Hour)
	future, futureKey := issue(t, m.future, goodID, time.Hour)
	otherCA, otherKey := issue(t, m.other, goodID, time.Hour)
	foreignID := mustID(t, "spiffe://example.org/ns/prod/sa/client")
	foreign, foreignKey := issue(t, m.foreign, foreignID, time.Hour)
	dev, devKey := issue(t, m.ca, devID, time.Hour)
	good, goodKey := issue(t, m.ca, goodID, time.Hour)
	refusals := []struct {
		name   string
		client *tls.Config
		reason Reason // "" for refusals by crypto/tls itself
		want   string // in the server's error
	}{
		{"no client certificate", rawClient(nil, nil, ALPNHTTP2), "", "didn't provide a certificate"},
		{"certificate from another CA", rawClient(otherCA, otherKey, ALPNHTTP2), ReasonUnknownCA, "signed by unknown authority"},
		{"certificate of an untrusted trust domain", rawClient(foreign, foreignKey, ALPNHTTP2), ReasonUntrustedTD, `trust domain "example.org" is not trusted`},
		{"expired certificate", rawClient(expired, expiredKey, ALPNHTTP2), ReasonExpired, "certificate expired at"},
		{"not yet valid certificate", rawClient(future, futureKey, ALPNHTTP2), ReasonNotYetValid, "certificate not valid before"},
		{"SPIFFE ID not allowed on the port", rawClient(dev, devKey, ALPNHTTP2), ReasonNotAuthorized, "port " + port + ": mtls: " + devID.String() + " is not allowed: matches none of namespaces [prod]"},
		{"unknown ALPN protocol", rawClient(good, goodKey, "imap"), "", "unsupported application protocols"},
		{"TLS 1.2", func() *tls.Config {
			c := rawClient(nil, nil, ALPNHTTP2)
			c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
			return c
		}(), "", "unsupported versions"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			c, err := dial(addr, tc.client)
			if err == nil {
				c.Close()
				t.Fatal("the client got through")
			}
			r := waitResult(t, results)
			if r.err == nil {
				t.Fatal("the server accepted the handshake")
			}
			if got := RefusalReason(r.err); got != tc.reason {
				t.Errorf("reason %q, want %q (error: %v)", got, tc.reason, r.err)
			}
			if !strings.Contains(r.err.Error(), tc.want) {
				t.Errorf("server error %q does not say %q", r.err, tc.want)
			}
			t.Logf("server: %v / client: %v", r.err, err)
		})
	}
}

func TestClientVerifiesServer(t *testing.T) {
	m := newTestMesh(t)
	srvID := mustID(t, "spiffe://cluster.local/ns/prod/sa/server")
	cliStore := storeFor(t, m.ca, mustID(t, "spiffe://cluster.local/ns/prod/sa/client"), time.Hour)
	tests := []struct {
		name   string
		server *Store
		reason Reason
		want   string
	}{
		{"right server", storeFor(t, m.ca, srvID, time.Hour), "", ""},
		{"wrong SPIFFE ID", storeFor(t, m.ca, mustID(t, "spiffe://cluster.local/ns/prod/sa/impostor"), time.Hour), ReasonWrongID,
			"server presented spiffe://cluster.local/ns/prod/sa/impostor, expected " + srvID.String()},
		{"server from another CA", storeFor(t, m.other, srvID, time.Hour, m.ca), ReasonUnknownCA, "unknown authority"},
		{"expired server certificate", storeFor(t, m.past, srvID, time.Hour), ReasonExpired, "expired at"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, results := tlsServer(t, ServerConfig(tc.server, ServerOptions{}))
			cfg, err := ClientConfig(cliStore, ClientOptions{ServerID: srvID, NextProto: ALPNOpaqueTCP})
			if err != nil {
				t.Fatal(err)
			}
			c, err := dial(addr, cfg)
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("the client accepted the server")
			}
			if RefusalReason(err) != tc.reason || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("client error %v (reason %q); want reason %q saying %q", err, RefusalReason(err), tc.reason, tc.want)
			}
			waitResult(t, results) // the server sees the client's alert
		})
	}
	t.Run("trust domain only", func(t *testing.T) {
		td := spiffeid.RequireTrustDomainFromString("cluster.local")
		for _, tc := range []struct {
			server *Store
			ok     bool
		}{{storeFor(t, m.ca, srvID, time.Hour), true}, {storeFor(t, m.ca, srvID, time.Hour), false}} {
			addr, results := tlsServer(t, ServerConfig(tc.server, ServerOptions{}))
			want := td
			if !tc.ok {
				want = spiffeid.RequireTrustDomainFromString("example.org")
			}
			cfg, err := ClientConfig(cliStore, ClientOptions{ServerTrustDomain: want})
			if err != nil {
				t.Fatal(err)
			}
			c, err := dial(addr, cfg)
			if tc.ok != (err == nil) {
				t.Fatalf("expecting trust domain %s: error %v, want ok=%v", want.Name(), err, tc.ok)
			}
			if err == nil {
				c.Close()
				continue
			}
			if RefusalReason(err) != ReasonWrongID || !strings.Contains(err.Error(), `expected a member of trust domain "example.org"`) {
				t.Errorf("client error %v", err)
			}
			waitResult(t, results)
		}
	})
	if _, err := ClientConfig(cliStore, ClientOptions{}); err == nil {
		t.Error("ClientConfig without ServerID succeeded")
	}
}

func TestServerWithoutCertificate(t *testing.T) {
	m := newTestMesh(t)
	addr, results := tlsServer(t, ServerConfig(NewStore(), ServerOptions{}))
	chain, key := issue(t, m.ca, mustID(t, "spiffe://cluster.local/ns/a/sa/b"), time.Hour)
	if _, err := dial(addr, rawClient(chain, key, ALPNHTTP2)); err == nil {
		t.Fatal("handshake succeeded with no server certificate")
	}
	if r := waitResult(t, results); RefusalReason(r.err) != ReasonNoLocalCert {
		t.Fatalf("server error %v", r.err)
	}
}

// modeListener serves one port the way the inbound listener does: sniff the
// first bytes, then mutual TLS or, if the port's policy admits it, plaintext.
func modeListener(t *testing.T, policy Policy, cfg *tls.Config) (string, <-chan error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	errs := make(chan error, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				br := bufio.NewReader(c)
				first, err := br.Peek(2)
				if err != nil {
					errs <- err
					return
				}
				if !DetectTLS(first) {
					if err := policy.AdmitPlaintext(); err != nil {
						errs <- err
						return
					}
					line, _ := br.ReadString('\n')
					io.WriteString(c, "PLAINTEXT "+line)
					errs <- nil
					return
				}
				tc := tls.Server(&peekedConn{Conn: c, r: br}, cfg)
				if err := tc.Handshake(); err != nil {
					errs <- err
					return
				}
				id, _ := PeerID(tc.ConnectionState())
				io.WriteString(tc, "OK "+id.String()+"\n")
				errs <- nil
			}()
		}
	}()
	return ln.Addr().String(), errs
}

type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestStrictAndPermissive(t *testing.T) {
	m := newTestMesh(t)
	srvID := mustID(t, "spiffe://cluster.local/ns/prod/sa/server")
	cfg := ServerConfig(storeFor(t, m.ca, srvID, time.Hour), ServerOptions{})
	clientCfg, err := ClientConfig(storeFor(t, m.ca, mustID(t, "spiffe://cluster.local/ns/prod/sa/client"), time.Hour), ClientOptions{ServerID: srvID, NextProto: ALPNHTTP2})
	if err != nil {
		t.Fatal(err)
	}
	plaintext := func(addr string) (string, error) {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\n")
		b, err := io.ReadAll(c)
		return string(b), err
	}
	for _, mode := range []Mode{Strict, Permissive} {
		t.Run(mode.String(), func(t *testing.T) {
			addr, errs := modeListener(t, Policy{Mode: mode}, cfg)
			got, _ := plaintext(addr)
			serverErr := <-errs
			if mode == Strict {
				if got != "" || serverErr == nil || !strings.Contains(serverErr.Error(), "plaintext refused: mode is STRICT") {
					t.Errorf("STRICT plaintext: client read %q, server error %v", got, serverErr)
				}
			} else if got != "PLAINTEXT GET / HTTP/1.1\r\n" || serverErr != nil {
				t.Errorf("PERMISSIVE plaintext: client read %q, server error %v", got, serverErr)
			}
			c, err := dial(addr, clientCfg)
			if err != nil {
				t.Fatalf("mutual TLS on a %s port: %v", mode, err)
			}
			c.Close()
			if err := <-errs; err != nil {
				t.Fatalf("server: %v", err)
			}
		})
	}
}
