package sds_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	authv1 "k8s.io/api/authentication/v1"

	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/mtls"
	"github.com/meshlet-dev/meshlet/sds"
	"github.com/meshlet-dev/meshlet/sds/internal/fakekube"
	"github.com/meshlet-dev/meshlet/sds/kubeauth"
)

// testLogger discards logs unless MESHLET_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("MESHLET_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// defaultTokens are the tokens the stand-in API server (fakekube, client-go's
// fake clientset; this session has no real kube-apiserver) knows:
// "web-token" for default/web, "db-token" for default/db, "api-token" for
// default/web bound to another audience, "old-token" expired, "user-token"
// for a human user.
func defaultTokens() map[string]fakekube.Token {
	return map[string]fakekube.Token{
		"web-token":  {User: fakekube.ServiceAccount("default", "web"), Audiences: []string{sds.TokenAudience}},
		"db-token":   {User: fakekube.ServiceAccount("default", "db"), Audiences: []string{sds.TokenAudience}},
		"api-token":  {User: fakekube.ServiceAccount("default", "web"), Audiences: []string{"https://kubernetes.default.svc"}},
		"old-token":  {User: fakekube.ServiceAccount("default", "web"), Audiences: []string{sds.TokenAudience}, Expired: true},
		"user-token": {User: authv1.UserInfo{Username: "alice"}, Audiences: []string{sds.TokenAudience}},
	}
}

// inlineDS and inlineBytes build and read inline data sources.
func inlineDS(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}

func inlineBytes(_ string, ds *corev3.DataSource) ([]byte, error) {
	switch s := ds.GetSpecifier().(type) {
	case *corev3.DataSource_InlineBytes:
		return s.InlineBytes, nil
	case *corev3.DataSource_InlineString:
		return []byte(s.InlineString), nil
	}
	return nil, fmt.Errorf("data source %v is not inline", ds)
}

type testControlPlane struct {
	ca   *mtls.CA
	srv  *sds.Server
	addr string
	done chan error
}

const testServerName = "meshlet-sds.test"

func newTestCA(t testing.TB) *mtls.CA {
	t.Helper()
	return testtool.MeshCA(t, spiffeid.RequireTrustDomainFromString("cluster.local"), nil)
}

// startControlPlane serves SDS over TLS on addr ("127.0.0.1:0" for any port).
func startControlPlane(t testing.TB, ca *mtls.CA, ttl time.Duration, addr string) *testControlPlane {
	t.Helper()
	srv, err := sds.NewServer(sds.ServerConfig{
		CA:            ca,
		Authenticator: &kubeauth.TokenReviewAuthenticator{Client: fakekube.APIServer(defaultTokens())},
		CertTTL:       ttl,
		ServingHosts:  []string{testServerName},
		Logger:        testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var lis net.Listener
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Rebinding the port a stopped server used may take a moment.
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	cp := &testControlPlane{ca: ca, srv: srv, addr: lis.Addr().String(), done: make(chan error, 1)}
	go func() { cp.done <- srv.Serve(lis) }()
	t.Cleanup(cp.stop)
	return cp
}

func (cp *testControlPlane) stop() {
	cp.srv.Stop()
	<-cp.done
	cp.done <- nil // later stops return at once
}

// clientTLS trusts the mesh root for the SDS server's certificate.
func clientTLS(ca *mtls.CA) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Root())
	return &tls.Config{RootCAs: pool, ServerName: testServerName, MinVersion: tls.VersionTLS13}
}

func staticToken(tok string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return tok, nil }
}

// runClient starts c.Run until the test ends.
func runClient(t testing.TB, c *sds.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func newClient(t testing.TB, cfg sds.ClientConfig) *sds.Client {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	c, err := sds.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func waitReady(t testing.TB, s *mtls.Store) *mtls.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap, err := s.WaitReady(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// eventually polls cond until it holds or 30 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var (
	webID = spiffeid.RequireFromString("spiffe://cluster.local/ns/default/sa/web")
	dbID  = spiffeid.RequireFromString("spiffe://cluster.local/ns/default/sa/db")
)
