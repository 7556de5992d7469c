package mtls

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer collects a process's output while the test polls it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestOpenSSLClient drives a STRICT inbound TLS server with openssl
// s_client, a TLS stack that is not ours: it is accepted with the right
// certificate and refused without one, with one from another CA, with an
// expired one and with a SPIFFE ID the port does not allow.
func TestOpenSSLClient(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl is required for this test (Debian: apt-get install openssl): %v", err)
	}
	m := newTestMesh(t)
	srvID := mustID(t, "spiffe://cluster.local/ns/prod/sa/server")
	goodID := mustID(t, "spiffe://cluster.local/ns/prod/sa/client")
	policies := &PortPolicies{Default: Policy{Mode: Strict, Namespaces: []string{"prod"}}}
	addr, results := tlsServer(t, ServerConfig(storeFor(t, m.ca, srvID, time.Hour), ServerOptions{Authorize: policies.Authorize}))

	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rootPEM := write("root.pem", EncodeCertificatesPEM([]*x509.Certificate{m.ca.Root()}))
	creds := func(name string, chain []*x509.Certificate, key crypto.Signer) []string {
		keyPEM, err := EncodePrivateKeyPEM(key)
		if err != nil {
			t.Fatal(err)
		}
		return []string{"-cert", write(name+".pem", EncodeCertificatesPEM(chain[:1])), "-key", write(name+"-key.pem", keyPEM)}
	}
	good, goodKey := issue(t, m.ca, goodID, time.Hour)
	other, otherKey := issue(t, m.other, goodID, time.Hour)
	expired, expiredKey := issue(t, m.past, goodID, time.Hour)
	dev, devKey := issue(t, m.ca, mustID(t, "spiffe://cluster.local/ns/dev/sa/client"), time.Hour)

	tests := []struct {
		name   string
		args   []string
		reason Reason // "" with accept
		accept bool
		want   string // in the server's error
		alert  string // in openssl's output
	}{
		{name: "right certificate", args: creds("good", good, goodKey), accept: true},
		{name: "no client certificate", want: "didn't provide a certificate", alert: "alert certificate required"},
		{name: "certificate from another CA", args: creds("other", other, otherKey), reason: ReasonUnknownCA, want: "unknown authority", alert: "alert bad certificate"},
		{name: "expired certificate", args: creds("expired", expired, expiredKey), reason: ReasonExpired, want: "expired at", alert: "alert bad certificate"},
		{name: "SPIFFE ID not allowed", args: creds("dev", dev, devKey), reason: ReasonNotAuthorized, want: "is not allowed", alert: "alert bad certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append([]string{"s_client", "-connect", addr, "-tls1_3", "-alpn", ALPNHTTP2,
				"-CAfile", rootPEM, "-verify_return_error"}, tc.args...)
			cmd := exec.CommandContext(ctx, openssl, args...)
			var out syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			r := waitResult(t, results)
			if tc.accept {
				if r.err != nil {
					t.Fatalf("server refused openssl: %v\nopenssl output:\n%s", r.err, out.String())
				}
				if id, _ := PeerID(r.state); id != goodID || r.state.NegotiatedProtocol != ALPNHTTP2 {
					t.Errorf("server saw peer %v, ALPN %q", id, r.state.NegotiatedProtocol)
				}
				for !strings.Contains(out.String(), "OK "+goodID.String()) {
					if ctx.Err() != nil {
						t.Fatalf("openssl never printed the server's greeting:\n%s", out.String())
					}
					time.Sleep(20 * time.Millisecond)
				}
				if !strings.Contains(out.String(), "Verify return code: 0 (ok)") {
					t.Errorf("openssl did not verify the server's chain:\n%s", out.String())
				}
				stdin.Close()
				cmd.Wait()
				return
			}
			// A refused client learns of it from the server's alert and exits.
			err = cmd.Wait()
			stdin.Close()
			if r.err == nil {
				t.Fatalf("server accepted openssl\nopenssl output:\n%s", out.String())
			}
			if RefusalReason(r.err) != tc.reason || !strings.Contains(r.err.Error(), tc.want) {
				t.Errorf("server error %v (reason %q), want reason %q saying %q", r.err, RefusalReason(r.err), tc.reason, tc.want)
			}
			if strings.Contains(out.String(), "OK spiffe://") {
				t.Errorf("openssl received application data:\n%s", out.String())
			}
			if !strings.Contains(out.String(), tc.alert) {
				t.Errorf("openssl output shows no %q (exit: %v):\n%s", tc.alert, err, out.String())
			}
			t.Logf("server: %v; openssl exit: %v; openssl: %s", r.err, err, alertLine(out.String()))
		})
	}
}

func alertLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "alert") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
