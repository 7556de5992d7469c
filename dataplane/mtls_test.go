package dataplane

import (
	"bufio"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/mtls"
)

// Mutual TLS between two real data planes on loopback: sidecar A (the
// client's) dials sidecar B's inbound listener as a meshed endpoint.

var (
	clientID = spiffeid.RequireFromString("spiffe://cluster.local/ns/prod/sa/client")
	webID    = spiffeid.RequireFromString("spiffe://cluster.local/ns/prod/sa/web")
)

// testCA is a mesh CA whose clock is skewed by skew.
func testCA(t testing.TB, skew time.Duration) *mtls.CA {
	t.Helper()
	return testtool.MeshCA(t, spiffeid.RequireTrustDomainFromString("cluster.local"), func() time.Time { return time.Now().Add(skew) })
}

func issueCert(t testing.TB, ca *mtls.CA, id spiffeid.ID, ttl time.Duration) ([]*x509.Certificate, crypto.Signer) {
	t.Helper()
	return testtool.Issue(t, ca, id, ttl)
}

// identity is a store holding a certificate for id from ca, trusting ca.
func identity(t testing.TB, ca *mtls.CA, id spiffeid.ID, ttl time.Duration) *mtls.Store {
	t.Helper()
	return testtool.IdentityStore(t, ca, id, ttl)
}

// tcpEcho serves a line-echo app on ip:0 ("echo: <line>").
func tcpEcho(t testing.TB, ip string) string {
	return serveTCP(t, ip, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			fmt.Fprintf(c, "echo: %s", line)
		}
	})
}

// startSidecar runs a data plane with an identity.
func startSidecar(t testing.TB, cfg *config.Config, id *mtls.Store) (*Server, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, AccessLog: logs, Workers: 2, Identity: id})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s, logs
}

// serverSidecar is sidecar B: an HTTP app behind inbound 127.0.0.2:0 and
// a TCP echo app behind inbound 127.0.0.3:0, both with mode m.
func serverSidecar(t testing.TB, id *mtls.Store, m *config.InboundMTLS) (s *Server, logs *logBuffer, httpIn, tcpIn string) {
	t.Helper()
	app := upstream(t, "127.0.0.1", upgradeOr(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "app saw %s", r.Proto)
	})))
	echo := tcpEcho(t, "127.0.0.1")
	inbound := func(name, addr, cluster string) config.Listener {
		return config.Listener{Name: name, Address: addr, Direction: config.Inbound, Protocol: config.ProtocolAuto, MTLS: m,
			Routes: []config.Route{{Name: cluster, Cluster: cluster, Timeout: 5 * time.Second}}}
	}
	cfg := &config.Config{
		Node:         config.Node{ID: "web", Cluster: "web"},
		Admin:        "127.0.0.1:0",
		DrainTimeout: time.Second,
		AccessLog:    config.AccessLog{Format: config.AccessLogText, FlushInterval: 10 * time.Millisecond},
		Listeners:    []config.Listener{inbound("inbound-http", "127.0.0.2:0", "app"), inbound("inbound-tcp", "127.0.0.3:0", "echo-app")},
		Clusters:     []config.Cluster{testCluster("app", endpoint(app, "a")), testCluster("echo-app", endpoint(echo, "a"))},
	}
	s, logs = startSidecar(t, cfg, id)
	addrs := s.ListenerAddrs()
	return s, logs, addrs["127.0.0.2:0"], addrs["127.0.0.3:0"]
}

// meshed is an endpoint reached with mTLS, expecting identity (may be "").
func meshedEndpoint(addr, identity string) lb.Endpoint {
	ep := endpoint(addr, "a")
	ep.Metadata = map[string]string{config.MetadataMeshed: "true"}
	if identity != "" {
		ep.Metadata[config.MetadataIdentity] = identity
	}
	return ep
}

// clientSidecar is sidecar A: outbound HTTP to httpIn as cluster echo,
// and an outbound TCP listener to tcpIn.
func clientSidecar(t *testing.T, id *mtls.Store, httpEP, tcpEP lb.Endpoint) (*Server, *logBuffer, string) {
	t.Helper()
	cfg := testConfig(noRetry, testCluster("echo", httpEP), testCluster("echo-tcp", tcpEP))
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "outbound-tcp", Address: "127.0.0.4:0", Direction: config.Outbound,
		OriginalDestination: "10.96.0.11:7000", Protocol: config.ProtocolTCP,
		Routes: []config.Route{{Name: "echo-tcp", Cluster: "echo-tcp"}}})
	s, logs := startSidecar(t, cfg, id)
	addrs := s.ListenerAddrs()
	proxyURLs.Store(s, "http://"+addrs["127.0.0.1:0"])
	return s, logs, addrs["127.0.0.4:0"]
}

func metricsText(t testing.TB, s *Server) string {
	t.Helper()
	return adminGet(t, s, "/stats/prometheus")
}

func TestMeshHTTPAndTCPOverMutualTLS(t *testing.T) {
	ca := testCA(t, 0)
	b, bLogs, httpIn, tcpIn := serverSidecar(t, identity(t, ca, webID, time.Hour), &config.InboundMTLS{
		PeerAuthorization: config.PeerAuthorization{Mode: config.MTLSStrict, Namespaces: []string{"prod"}}})
	a, aLogs, tcpOut := clientSidecar(t, identity(t, ca, clientID, time.Hour),
		meshedEndpoint(httpIn, webID.String()), meshedEndpoint(tcpIn, webID.String()))

	client := &http.Client{Timeout: 5 * time.Second}
	for i := range 20 {
		code, body, _ := get(t, client, a, fmt.Sprintf("/r%d", i))
		if code != 200 || body != "app saw HTTP/1.1" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	// B terminated HTTP/2 from A over mTLS and logged A's identity; A
	// logged B's.
	bLine := bLogs.waitLine(t, `"GET /r0 HTTP/2.0" 200`, clientID.String())
	aLine := aLogs.waitLine(t, `"GET /r0 HTTP/1.1" 200`, webID.String())
	t.Logf("B: %s\nA: %s", bLine, aLine)
	// One multiplexed connection per worker per endpoint: 20 requests on
	// one client connection reach one of A's workers, so one handshake.
	am := metricsText(t, a)
	if !strings.Contains(am, `meshlet_mtls_handshakes_total{direction="outbound",result="ok"} 1`) {
		t.Errorf("A's handshakes:\n%s", grepLines(am, "meshlet_mtls_handshakes_total"))
	}
	bm := metricsText(t, b)
	want := `connection_security_policy="mutual_tls",destination_principal="` + webID.String() + `",destination_service="echo"`
	if !strings.Contains(bm, want) || !strings.Contains(bm, `source_principal="`+clientID.String()+`"`) {
		t.Errorf("B's request metrics lack the peer identities:\n%s", grepLines(bm, "istio_requests_total"))
	}

	// Opaque TCP: the bytes cross A -> mTLS (meshlet-tcp) -> B -> the app.
	c, err := net.DialTimeout("tcp", tcpOut, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	for _, msg := range []string{"one", "two"} {
		fmt.Fprintf(c, "%s\n", msg)
		line, err := r.ReadString('\n')
		if err != nil || line != "echo: "+msg+"\n" {
			t.Fatalf("TCP through the mesh: %q, %v", line, err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("after half-close: %q, %v", rest, err)
	}
	c.Close()
	bLogs.waitLine(t, "echo-app", clientID.String())
	aLogs.waitLine(t, "echo-tcp", webID.String())
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestMeshOutboundVerifiesTheEndpoint(t *testing.T) {
	ca := testCA(t, 0)
	_, _, httpIn, tcpIn := serverSidecar(t, identity(t, ca, webID, time.Hour), nil)
	// A expects another identity at B's address: the handshake fails, the
	// request gets Envoy's UF 503 with the TLS error as the reason.
	impostor := "spiffe://cluster.local/ns/prod/sa/db"
	a, aLogs, tcpOut := clientSidecar(t, identity(t, ca, clientID, time.Hour), meshedEndpoint(httpIn, impostor), meshedEndpoint(tcpIn, impostor))
	code, body, _ := get(t, &http.Client{Timeout: 5 * time.Second}, a, "/")
	if code != 503 || !strings.Contains(body, "TLS_error") || !strings.Contains(body, "expected "+impostor) {
		t.Errorf("got %d %q", code, body)
	}
	aLogs.waitLine(t, `"GET / HTTP/1.1" 503 UF`, "TLS_error", "server presented "+webID.String())
	c, err := net.Dial("tcp", tcpOut)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if n, _ := c.Read(make([]byte, 1)); n != 0 {
		t.Error("TCP to a wrong identity got data")
	}
	c.Close()
	aLogs.waitLine(t, "UF,URX", "upstream_max_connect_attempts_exceeded", "TLS_error")
	if m := metricsText(t, a); !strings.Contains(m, `meshlet_mtls_handshakes_total{direction="outbound",result="wrong_id"}`) {
		t.Errorf("no wrong_id refusal counted:\n%s", grepLines(m, "meshlet_mtls"))
	}
	// Without an identity in the endpoint, any server of the own trust
	// domain is accepted.
	a2, _, _ := clientSidecar(t, identity(t, ca, clientID, time.Hour), meshedEndpoint(httpIn, ""), meshedEndpoint(tcpIn, ""))
	if code, body, _ := get(t, &http.Client{Timeout: 5 * time.Second}, a2, "/"); code != 200 {
		t.Errorf("trust-domain match: %d %q", code, body)
	}
}

func TestInboundPermissiveAndStrict(t *testing.T) {
	ca := testCA(t, 0)
	for _, mode := range []config.MTLSMode{config.MTLSPermissive, config.MTLSStrict} {
		t.Run(string(mode), func(t *testing.T) {
			_, logs, httpIn, tcpIn := serverSidecar(t, identity(t, ca, webID, time.Hour), &config.InboundMTLS{
				PeerAuthorization: config.PeerAuthorization{Mode: mode}})
			// Plaintext HTTP from a client without a sidecar.
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + httpIn + "/plain")
			if mode == config.MTLSPermissive {
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("PERMISSIVE plaintext: %v %v", resp, err)
				}
				resp.Body.Close()
				logs.waitLine(t, `"GET /plain HTTP/1.1" 200`)
			} else {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("STRICT accepted plaintext: %d", resp.StatusCode)
				}
				logs.waitLine(t, " NR ", "filter_chain_not_found", "plaintext refused: mode is STRICT")
			}
			// The app's own TLS (ALPN h2, not meshlet's) from a client
			// without a sidecar: PERMISSIVE passes it through as TCP to
			// the app (here the echo app, which answers garbage to a
			// ClientHello by closing); STRICT takes it for mTLS and
			// refuses it (here for its ALPN, before any certificate).
			tc, err := tls.Dial("tcp", tcpIn, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
			if err == nil {
				tc.Close()
				t.Fatalf("%s: a plain TLS client completed a handshake", mode)
			}
			if mode == config.MTLSStrict {
				logs.waitLine(t, "downstream_tls_handshake_failed", "TLS_error")
			} else {
				logs.waitLine(t, "echo-app")
			}
		})
	}
}

// TestRotationKeepsConnections swaps B's and A's certificates while a
// pooled HTTP/2 connection is open: it keeps working without a new
// handshake, and the next handshake serves the new certificate.
func TestRotationKeepsConnections(t *testing.T) {
	ca := testCA(t, 0)
	bID := identity(t, ca, webID, time.Hour)
	b, _, httpIn, tcpIn := serverSidecar(t, bID, nil)
	aID := identity(t, ca, clientID, time.Hour)
	a, _, _ := clientSidecar(t, aID, meshedEndpoint(httpIn, webID.String()), meshedEndpoint(tcpIn, webID.String()))
	client := &http.Client{Timeout: 5 * time.Second}
	if code, _, _ := get(t, client, a, "/before"); code != 200 {
		t.Fatal(code)
	}
	oldSerial := bID.Current().Certificate.Leaf.SerialNumber
	for _, s := range []*mtls.Store{aID, bID} {
		id := clientID
		if s == bID {
			id = webID
		}
		chain, key := issueCert(t, ca, id, time.Hour)
		if err := s.SetCertificate(chain, key); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if code, _, _ := get(t, client, a, fmt.Sprintf("/after%d", i)); code != 200 {
			t.Fatalf("after rotation: %d", code)
		}
	}
	if m := metricsText(t, b); !strings.Contains(m, `meshlet_mtls_handshakes_total{direction="inbound",result="ok"} 1`) {
		t.Errorf("rotation opened new connections:\n%s", grepLines(m, "meshlet_mtls"))
	}
	// A new handshake gets the new certificate.
	cfg, err := mtls.ClientConfig(identity(t, ca, clientID, time.Hour), mtls.ClientOptions{ServerID: webID, NextProto: mtls.ALPNOpaqueTCP})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tls.Dial("tcp", tcpIn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if got := tc.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(oldSerial) == 0 {
		t.Error("a new handshake after rotation served the old certificate")
	}
}

// TestInboundRefusalsWithOpenSSL drives B's STRICT inbound (namespace
// prod only) with openssl s_client, a TLS stack that is not ours.
func TestInboundRefusalsWithOpenSSL(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl is required for this test (Debian: apt-get install openssl): %v", err)
	}
	ca, other, past := testCA(t, 0), testCA(t, 0), testCA(t, -48*time.Hour)
	b, logs, _, tcpIn := serverSidecar(t, identity(t, ca, webID, time.Hour), &config.InboundMTLS{
		PeerAuthorization: config.PeerAuthorization{Mode: config.MTLSStrict, Namespaces: []string{"prod"}}})
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rootPEM := write("root.pem", mtls.EncodeCertificatesPEM([]*x509.Certificate{ca.Root()}))
	creds := func(name string, ca *mtls.CA, id spiffeid.ID) []string {
		chain, key := issueCert(t, ca, id, time.Hour)
		keyPEM, err := mtls.EncodePrivateKeyPEM(key)
		if err != nil {
			t.Fatal(err)
		}
		return []string{"-cert", write(name+".pem", mtls.EncodeCertificatesPEM(chain[:1])), "-key", write(name+"-key.pem", keyPEM)}
	}
	tests := []struct {
		name   string
		args   []string
		result string // meshlet_mtls_handshakes_total result; "ok" accepts
		log    string // in B's access-log line
	}{
		{"right certificate", creds("good", ca, clientID), "ok", ""},
		{"no client certificate", nil, "no_certificate|handshake_error", "didn't provide a certificate"},
		{"certificate from another CA", creds("other", other, clientID), "unknown_authority", "unknown authority"},
		{"expired certificate", creds("expired", past, clientID), "expired", "certificate expired at"},
		{"SPIFFE ID not allowed", creds("dev", ca, spiffeid.RequireFromString("spiffe://cluster.local/ns/dev/sa/client")), "not_authorized", "matches none of namespaces [prod]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append([]string{"s_client", "-connect", tcpIn, "-tls1_3", "-alpn", mtls.ALPNOpaqueTCP,
				"-CAfile", rootPEM, "-verify_return_error", "-quiet"}, tc.args...)
			cmd := exec.CommandContext(ctx, openssl, args...)
			var out logBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if tc.result == "ok" {
				fmt.Fprintf(stdin, "hello through the mesh\n")
				for !strings.Contains(out.String(), "echo: hello through the mesh") {
					if ctx.Err() != nil {
						t.Fatalf("openssl never got the app's echo:\n%s", out.String())
					}
					time.Sleep(20 * time.Millisecond)
				}
				stdin.Close()
				_ = cmd.Process.Kill() // -quiet ignores EOF on stdin
				_ = cmd.Wait()
				logs.waitLine(t, "echo-app", clientID.String())
				return
			}
			err = cmd.Wait()
			stdin.Close()
			if strings.Contains(out.String(), "echo:") {
				t.Errorf("a refused client reached the app:\n%s", out.String())
			}
			line := logs.waitLine(t, "downstream_tls_handshake_failed", tc.log)
			t.Logf("openssl exit %v; B: %s", err, line)
			m := metricsText(t, b)
			found := false
			for _, r := range strings.Split(tc.result, "|") {
				found = found || strings.Contains(m, `meshlet_mtls_handshakes_total{direction="inbound",result="`+r+`"}`)
			}
			if !found {
				t.Errorf("no refusal %s counted:\n%s", tc.result, grepLines(m, "meshlet_mtls"))
			}
		})
	}
	// Plaintext to a STRICT port is refused too.
	c, err := net.Dial("tcp", tcpIn)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "hello in plaintext\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Errorf("plaintext got %q", b)
	}
	c.Close()
	logs.waitLine(t, " NR ", "filter_chain_not_found")
}

// FuzzSniffClientHello: whatever the first bytes, sniffing never panics,
// never calls non-TLS mesh traffic, and a real mesh ClientHello is found.
func FuzzSniffClientHello(f *testing.F) {
	hello := func(protos ...string) []byte {
		var rec []byte
		c := &captureConn{w: &rec}
		_ = tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: protos}).Handshake()
		return rec
	}
	f.Add(hello(mtls.ALPNHTTP2))
	f.Add(hello(mtls.ALPNOpaqueTCP))
	f.Add(hello("h2", "http/1.1"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0xff, 0xff})
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x00, 0x00, 0x00})
	if isTLS, mesh := sniffClientHello(bufio.NewReader(strings.NewReader(string(hello(mtls.ALPNHTTP2))))); !isTLS || !mesh {
		f.Fatalf("a mesh ClientHello sniffed as tls=%v mesh=%v", isTLS, mesh)
	}
	if _, mesh := sniffClientHello(bufio.NewReader(strings.NewReader(string(hello("h2"))))); mesh {
		f.Fatal("an app's h2 ClientHello sniffed as mesh")
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		isTLS, mesh := sniffClientHello(bufio.NewReaderSize(strings.NewReader(string(b)), inboundBuffer))
		if mesh && !isTLS {
			t.Fatal("mesh without TLS")
		}
		// A TLS record header is 5 bytes: fewer (a stalled client) is not TLS.
		if isTLS != (mtls.DetectTLS(b) && len(b) >= 5) {
			t.Fatalf("isTLS %v for first bytes % x", isTLS, b[:min(len(b), 5)])
		}
	})
}

// captureConn records what a TLS client writes (its ClientHello) and
// reads EOF, so the handshake stops after the hello.
type captureConn struct {
	net.Conn
	w *[]byte
}

func (c *captureConn) Write(p []byte) (int, error) { *c.w = append(*c.w, p...); return len(p), nil }
func (c *captureConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (c *captureConn) Close() error                { return nil }
func (c *captureConn) SetDeadline(time.Time) error { return nil }
func (c *captureConn) SetWriteDeadline(time.Time) error {
	return nil
}
func (c *captureConn) SetReadDeadline(time.Time) error { return nil }
func (c *captureConn) LocalAddr() net.Addr             { return &net.TCPAddr{} }
func (c *captureConn) RemoteAddr() net.Addr            { return &net.TCPAddr{} }

// upgradeOr serves an "Upgrade: echo-line" request by switching protocols
// and echoing lines ("echo: <line>") on the hijacked connection, and
// everything else with h.
func upgradeOr(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo-line" {
			h.ServeHTTP(w, r)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo-line\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			fmt.Fprintf(brw, "echo: %s", line)
			brw.Flush()
		}
	})
}

// upgradeThrough sends an Upgrade request to the HTTP listener at addr and
// echoes two lines over the switched connection.
func upgradeThrough(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: echo\r\nConnection: Upgrade\r\nUpgrade: echo-line\r\n\r\n")
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade response: %v %v", resp, err)
	}
	for _, msg := range []string{"one", "two"} {
		fmt.Fprintf(c, "%s\n", msg)
		line, err := r.ReadString('\n')
		if err != nil || line != "echo: "+msg+"\n" {
			t.Fatalf("after the upgrade: %q, %v", line, err)
		}
	}
}

// TestUpgradeThroughTheMesh: an Upgrade (WebSocket-style) request through
// sidecar A to a meshed endpoint travels as HTTP/1.1 over an opaque mTLS
// stream (HTTP/2 cannot carry it) and the switched connection carries
// bytes both ways; the same works with plaintext between the sidecars.
func TestUpgradeThroughTheMesh(t *testing.T) {
	ca := testCA(t, 0)
	_, bLogs, httpIn, tcpIn := serverSidecar(t, identity(t, ca, webID, time.Hour), nil)
	for _, meshed := range []bool{true, false} {
		t.Run(fmt.Sprintf("meshed=%v", meshed), func(t *testing.T) {
			ep, tep := endpoint(httpIn, "a"), endpoint(tcpIn, "a")
			if meshed {
				ep, tep = meshedEndpoint(httpIn, webID.String()), meshedEndpoint(tcpIn, webID.String())
			}
			a, aLogs, _ := clientSidecar(t, identity(t, ca, clientID, time.Hour), ep, tep)
			upgradeThrough(t, strings.TrimPrefix(proxyURL(a), "http://"))
			line := aLogs.waitLine(t, `"GET /ws HTTP/1.1" 101`)
			if meshed && !strings.Contains(line, webID.String()) {
				t.Errorf("A's log line lacks the peer: %s", line)
			}
		})
	}
	bLogs.waitLine(t, " app ", clientID.String())
}
