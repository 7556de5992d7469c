package sds_test

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshlet-dev/meshlet/mtls"
	"github.com/meshlet-dev/meshlet/sds"
)

// rawSDS is a plain gRPC SDS client, for checking the server's wire
// behaviour precisely.
func rawSDS(t *testing.T, cp *testControlPlane) secretv3.SecretDiscoveryServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(cp.ca))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return secretv3.NewSecretDiscoveryServiceClient(conn)
}

func csrRequest(t *testing.T, id spiffeid.ID, names ...string) *discoveryv3.DiscoveryRequest {
	t.Helper()
	key, err := mtls.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := mtls.NewCSR(key, id)
	if err != nil {
		t.Fatal(err)
	}
	return &discoveryv3.DiscoveryRequest{
		TypeUrl:       sds.SecretTypeURL,
		ResourceNames: names,
		Node: &corev3.Node{Id: "test", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			sds.CSRMetadataKey: structpb.NewStringValue(string(csr)),
		}}},
	}
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// firstResponse opens a stream, sends req and returns the first response.
func firstResponse(t *testing.T, api secretv3.SecretDiscoveryServiceClient, tok string, req *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if tok != "" {
		ctx = withToken(ctx, tok)
	}
	st, err := api.StreamSecrets(ctx)
	if err != nil {
		return nil, err
	}
	// A Send to a stream the server already ended reports io.EOF; the
	// status comes from Recv.
	_ = st.Send(req)
	return st.Recv()
}

func secrets(t *testing.T, resp *discoveryv3.DiscoveryResponse) map[string]*tlsv3.Secret {
	t.Helper()
	out := map[string]*tlsv3.Secret{}
	for _, r := range resp.GetResources() {
		s := &tlsv3.Secret{}
		if err := r.UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		out[s.GetName()] = s
	}
	return out
}

// TestClientGetsCertificateAndBundle: over real gRPC and TLS on loopback the
// client gets "default" and "ROOTCA", and the store holds a certificate for
// its own key, with the token's identity, that verifies against the bundle.
func TestClientGetsCertificateAndBundle(t *testing.T) {
	ca := newTestCA(t)
	cp := startControlPlane(t, ca, time.Hour, "127.0.0.1:0")
	store := mtls.NewStore()
	c := newClient(t, sds.ClientConfig{Target: cp.addr, TLS: clientTLS(ca), Token: staticToken("web-token"), ID: webID, Store: store})
	runClient(t, c)
	snap := waitReady(t, store)
	if snap.ID != webID {
		t.Fatalf("store holds %v, want %v", snap.ID, webID)
	}
	if !snap.Bundles()[0].HasX509Authority(ca.Root()) {
		t.Fatal("ROOTCA is not the mesh root")
	}
	leaf := snap.Certificate.Leaf
	if _, _, err := x509svid.Verify([]*x509.Certificate{leaf}, snap); err != nil {
		t.Fatalf("delivered chain does not verify: %v", err)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got < time.Hour || got > time.Hour+11*time.Second {
		t.Errorf("certificate lifetime %v, want the configured hour", got)
	}
	if s := c.SecondsUntilExpiry(); s < 3500 || s > 3601 {
		t.Errorf("SecondsUntilExpiry = %v", s)
	}
	if rt := c.RenewalTime(); rt.Before(leaf.NotBefore.Add(25*time.Minute)) || rt.After(leaf.NotAfter.Add(-25*time.Minute)) {
		t.Errorf("renewal at %v is not about half of [%v, %v]", rt, leaf.NotBefore, leaf.NotAfter)
	}

	// On the wire, "default" carries the chain and no private key.
	resp, err := firstResponse(t, rawSDS(t, cp), "web-token", csrRequest(t, webID, sds.CertificateResource, sds.RootCAResource))
	if err != nil {
		t.Fatal(err)
	}
	got := secrets(t, resp)
	if tc := got[sds.CertificateResource].GetTlsCertificate(); tc == nil || tc.GetPrivateKey() != nil || tc.GetCertificateChain() == nil {
		t.Errorf("default secret: %v", got[sds.CertificateResource])
	}
	if vc := got[sds.RootCAResource].GetValidationContext(); vc.GetTrustedCa() == nil {
		t.Errorf("ROOTCA secret: %v", got[sds.RootCAResource])
	}
	if resp.GetVersionInfo() == "" || resp.GetNonce() == "" || resp.GetTypeUrl() != sds.SecretTypeURL {
		t.Errorf("response version %q nonce %q type %q", resp.GetVersionInfo(), resp.GetNonce(), resp.GetTypeUrl())
	}
}

func TestTokenRefused(t *testing.T) {
	ca := newTestCA(t)
	cp := startControlPlane(t, ca, time.Hour, "127.0.0.1:0")
	api := rawSDS(t, cp)
	tests := []struct {
		token string
		want  string
	}{
		{"", "want one \"authorization: Bearer <token>\""},
		{"not-a-token", "invalid bearer token"},
		{"api-token", "token audiences"}, // bound to another audience
		{"old-token", "expired"},
		{"user-token", `"alice" is not a service account`},
		{"apiserver-down", "TokenReview: connection refused"},
	}
	for _, tc := range tests {
		_, err := firstResponse(t, api, tc.token, csrRequest(t, webID))
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token %q: err = %v, want Unauthenticated saying %q", tc.token, err, tc.want)
		}
	}

	// The client with a wrong token gets nothing, and keeps trying.
	store := mtls.NewStore()
	c := newClient(t, sds.ClientConfig{Target: cp.addr, TLS: clientTLS(ca), Token: staticToken("not-a-token"), ID: webID, Store: store,
		InitialBackoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	runClient(t, c)
	eventually(t, "several refused streams", func() bool { return c.Streams() >= 3 })
	if store.Current().Certificate != nil {
		t.Fatal("a client with a wrong token got a certificate")
	}
}

func TestCSRForAnotherIdentityRefused(t *testing.T) {
	ca := newTestCA(t)
	cp := startControlPlane(t, ca, time.Hour, "127.0.0.1:0")
	api := rawSDS(t, cp)
	// web's token, db's CSR.
	_, err := firstResponse(t, api, "web-token", csrRequest(t, dbID))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), dbID.String()) || !strings.Contains(err.Error(), "proven identity "+webID.String()) {
		t.Fatalf("err = %v, want PermissionDenied naming both identities", err)
	}
	// No CSR at all.
	_, err = firstResponse(t, api, "web-token", &discoveryv3.DiscoveryRequest{TypeUrl: sds.SecretTypeURL, ResourceNames: []string{sds.CertificateResource}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `node.metadata["CSR"]`) {
		t.Fatalf("no CSR: err = %v", err)
	}
	// ROOTCA alone needs no CSR.
	resp, err := firstResponse(t, api, "web-token", &discoveryv3.DiscoveryRequest{TypeUrl: sds.SecretTypeURL, ResourceNames: []string{sds.RootCAResource}})
	if err != nil || len(resp.GetResources()) != 1 {
		t.Fatalf("ROOTCA only: %v, %v", resp, err)
	}
	// Unknown resource names are refused.
	_, err = firstResponse(t, api, "web-token", csrRequest(t, webID, "spiffe://cluster.local/ns/default/sa/web"))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "unknown resource") {
		t.Fatalf("unknown name: err = %v", err)
	}

	// A sidecar configured with db's ID but holding web's token never gets one.
	store := mtls.NewStore()
	c := newClient(t, sds.ClientConfig{Target: cp.addr, TLS: clientTLS(ca), Token: staticToken("web-token"), ID: dbID, Store: store,
		InitialBackoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	runClient(t, c)
	eventually(t, "several refused streams", func() bool { return c.Streams() >= 3 })
	if store.Current().Certificate != nil {
		t.Fatal("a CSR for another identity was signed")
	}
}

func TestDeltaSecretsUnimplemented(t *testing.T) {
	ca := newTestCA(t)
	cp := startControlPlane(t, ca, time.Hour, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(withToken(context.Background(), "web-token"), 30*time.Second)
	defer cancel()
	st, err := rawSDS(t, cp).DeltaSecrets(ctx)
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("DeltaSecrets: %v, want Unimplemented (state of the world only, as istio-agent and SPIRE)", err)
	}
}

func TestFetchSecrets(t *testing.T) {
	ca := newTestCA(t)
	cp := startControlPlane(t, ca, time.Hour, "127.0.0.1:0")
	api := rawSDS(t, cp)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := api.FetchSecrets(withToken(ctx, "db-token"), csrRequest(t, dbID))
	if err != nil {
		t.Fatal(err)
	}
	got := secrets(t, resp)
	chainPEM, err := inlineBytes("chain", got[sds.CertificateResource].GetTlsCertificate().GetCertificateChain())
	if err != nil {
		t.Fatal(err)
	}
	chain, err := mtls.ParseCertificatesPEM(chainPEM)
	if err != nil {
		t.Fatal(err)
	}
	if id, _, err := x509svid.Verify(chain, ca.Bundle()); err != nil || id != dbID {
		t.Fatalf("fetched chain: %v %v", id, err)
	}
	if got[sds.RootCAResource] == nil {
		t.Fatal("no ROOTCA")
	}
	if _, err := api.FetchSecrets(withToken(ctx, "web-token"), csrRequest(t, dbID)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("FetchSecrets with another identity's CSR: %v", err)
	}
	if _, err := api.FetchSecrets(ctx, csrRequest(t, dbID)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("FetchSecrets without a token: %v", err)
	}
}
