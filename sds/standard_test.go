package sds_test

import (
	"crypto"
	"crypto/x509"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/mtls"
	"github.com/meshlet-dev/meshlet/sds"
)

// scriptedSDS is a standard SDS server written with go-control-plane types,
// shaped like a SPIRE agent: it serves a Unix socket, needs no token, and
// delivers the private key with the chain. The test scripts its responses
// and sees every request.
type scriptedSDS struct {
	secretv3.UnimplementedSecretDiscoveryServiceServer
	responses chan *discoveryv3.DiscoveryResponse
	requests  chan *discoveryv3.DiscoveryRequest
}

func startScriptedSDS(t *testing.T) (*scriptedSDS, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptedSDS{responses: make(chan *discoveryv3.DiscoveryResponse, 16), requests: make(chan *discoveryv3.DiscoveryRequest, 64)}
	g := grpc.NewServer()
	secretv3.RegisterSecretDiscoveryServiceServer(g, s)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return s, "unix://" + sock
}

func (s *scriptedSDS) StreamSecrets(stream secretv3.SecretDiscoveryService_StreamSecretsServer) error {
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			s.requests <- req
		}
	}()
	for {
		select {
		case resp := <-s.responses:
			if err := stream.Send(resp); err != nil {
				return err
			}
		case err := <-errc:
			return err
		}
	}
}

func (s *scriptedSDS) nextRequest(t *testing.T) *discoveryv3.DiscoveryRequest {
	t.Helper()
	select {
	case r := <-s.requests:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no request from the client within 30s")
	}
	return nil
}

func anySecret(t *testing.T, s *tlsv3.Secret) *anypb.Any {
	t.Helper()
	a, err := anypb.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func keyAndChain(t *testing.T, chain []*x509.Certificate, key crypto.Signer) *tlsv3.Secret {
	t.Helper()
	keyPEM, err := mtls.EncodePrivateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	return &tlsv3.Secret{Name: sds.CertificateResource, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: inlineDS(mtls.EncodeCertificatesPEM(chain)),
		PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(keyPEM)}},
	}}}
}

func plainRootCA(roots ...*x509.Certificate) *tlsv3.Secret {
	return &tlsv3.Secret{Name: sds.RootCAResource, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: inlineDS(mtls.EncodeCertificatesPEM(roots)),
	}}}
}

// spiffeRootCA is the shape a SPIRE agent sends an Envoy >= 1.18.
func spiffeRootCA(t *testing.T, bundles map[string][]*x509.Certificate) *tlsv3.Secret {
	t.Helper()
	cfg := &tlsv3.SPIFFECertValidatorConfig{}
	for td, roots := range bundles {
		cfg.TrustDomains = append(cfg.TrustDomains, &tlsv3.SPIFFECertValidatorConfig_TrustDomain{Name: td, TrustBundle: inlineDS(mtls.EncodeCertificatesPEM(roots))})
	}
	return &tlsv3.Secret{Name: sds.RootCAResource, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		CustomValidatorConfig: &corev3.TypedExtensionConfig{Name: sds.SPIFFEValidatorName, TypedConfig: anySecretConfig(t, cfg)},
	}}}
}

func anySecretConfig(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func response(t *testing.T, version, nonce string, secrets ...*tlsv3.Secret) *discoveryv3.DiscoveryResponse {
	r := &discoveryv3.DiscoveryResponse{VersionInfo: version, Nonce: nonce, TypeUrl: sds.SecretTypeURL}
	for _, s := range secrets {
		r.Resources = append(r.Resources, anySecret(t, s))
	}
	return r
}

// svid issues a key and chain from ca, SPIRE style (any path in the domain).
func svid(t *testing.T, ca *mtls.CA, id string, ttl time.Duration) ([]*x509.Certificate, crypto.Signer) {
	t.Helper()
	return testtool.Issue(t, ca, spiffeid.RequireFromString(id), ttl)
}

func caFor(t *testing.T, td string, skew time.Duration) *mtls.CA {
	t.Helper()
	trust := spiffeid.RequireTrustDomainFromString(td)
	m, err := mtls.GenerateCAMaterial(mtls.CAOptions{TrustDomain: trust, Now: func() time.Time { return time.Now().Add(-72 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := mtls.NewCA(trust, m, func() time.Time { return time.Now().Add(skew) })
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestNACKKeepsLastGood: against a standard (key-delivering) SDS server, the
// client ACKs a good response, NACKs each malformed one with the last good
// version and a reason, keeps the last good secrets, and ACKs the next good
// one.
func TestNACKKeepsLastGood(t *testing.T) {
	srv, target := startScriptedSDS(t)
	ca := caFor(t, "example.org", 0)
	stranger := caFor(t, "example.org", 0)
	past, err := mtls.NewCA(ca.TrustDomain(), ca.Material(), func() time.Time { return time.Now().Add(-48 * time.Hour) }) // the same CA, signing in the past
	if err != nil {
		t.Fatal(err)
	}
	const id = "spiffe://example.org/myservice"
	store := mtls.NewStore()
	c := newClient(t, sds.ClientConfig{Target: target, Store: store})
	runClient(t, c)

	first := srv.nextRequest(t)
	if _, hasCSR := first.GetNode().GetMetadata().GetFields()[sds.CSRMetadataKey]; hasCSR || first.GetTypeUrl() != sds.SecretTypeURL ||
		strings.Join(first.GetResourceNames(), ",") != "default,ROOTCA" || first.GetResponseNonce() != "" {
		t.Fatalf("first request: %v", first)
	}
	chainA, keyA := svid(t, ca, id, time.Hour)
	srv.responses <- response(t, "1", "n1", keyAndChain(t, chainA, keyA), plainRootCA(ca.Root()))
	if ack := srv.nextRequest(t); ack.GetVersionInfo() != "1" || ack.GetResponseNonce() != "n1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ACK of version 1: %v", ack)
	}
	good := waitReady(t, store)
	if good.ID.String() != id || !good.Certificate.Leaf.Equal(chainA[0]) {
		t.Fatalf("store after version 1: %v", good.ID)
	}

	chainB, keyB := svid(t, ca, id, time.Hour)
	expired, expiredKey := svid(t, past, id, time.Hour)
	garbage := keyAndChain(t, chainB, keyB)
	garbage.GetTlsCertificate().CertificateChain = inlineDS([]byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"))
	fromFile := keyAndChain(t, chainB, keyB)
	fromFile.GetTlsCertificate().CertificateChain = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: "/etc/certs/chain.pem"}}
	rootAsCert := keyAndChain(t, chainB, keyB)
	rootAsCert.Name = sds.RootCAResource
	bad := []struct {
		name    string
		secrets []*tlsv3.Secret
		want    string
	}{
		{"malformed chain", []*tlsv3.Secret{garbage}, "certificate_chain"},
		{"key of another certificate", []*tlsv3.Secret{keyAndChain(t, chainB, keyA)}, "does not match the private key"},
		{"file data source", []*tlsv3.Secret{fromFile}, "only inline"},
		{"ROOTCA that is a certificate", []*tlsv3.Secret{keyAndChain(t, chainB, keyB), rootAsCert}, "is not a validation_context"},
		{"chain from another CA than ROOTCA", []*tlsv3.Secret{keyAndChain(t, chainB, keyB), plainRootCA(stranger.Root())}, "does not verify against the trust bundle"},
		{"expired certificate", []*tlsv3.Secret{keyAndChain(t, expired, expiredKey)}, "expired at"},
		{"nothing requested", []*tlsv3.Secret{{Name: "other"}}, "has neither"},
	}
	for i, tc := range bad {
		version, nonce := string(rune('2'+i)), "bad"+string(rune('2'+i))
		srv.responses <- response(t, version, nonce, tc.secrets...)
		nack := srv.nextRequest(t)
		if nack.GetResponseNonce() != nonce || nack.GetVersionInfo() != "1" || nack.GetErrorDetail() == nil ||
			!strings.Contains(nack.GetErrorDetail().GetMessage(), tc.want) {
			t.Errorf("%s: want a NACK of nonce %s keeping version 1 and saying %q; got %v", tc.name, nonce, tc.want, nack)
		}
		if store.Current() != good {
			t.Fatalf("%s: the store changed after a NACK", tc.name)
		}
	}
	if c.NACKs() != uint64(len(bad)) {
		t.Errorf("NACKs() = %d, want %d", c.NACKs(), len(bad))
	}

	srv.responses <- response(t, "9", "n9", keyAndChain(t, chainB, keyB))
	if ack := srv.nextRequest(t); ack.GetVersionInfo() != "9" || ack.GetErrorDetail() != nil {
		t.Fatalf("ACK of version 9: %v", ack)
	}
	eventually(t, "the rotated certificate", func() bool { return store.Current().Certificate.Leaf.Equal(chainB[0]) })
}

// TestSPIFFEValidatorROOTCA: a ROOTCA in Envoy's SPIFFE-validator shape (what
// SPIRE sends an Envoy >= 1.18) yields one bundle per trust domain, and a
// peer of the federated domain then verifies.
func TestSPIFFEValidatorROOTCA(t *testing.T) {
	srv, target := startScriptedSDS(t)
	own, partner := caFor(t, "example.org", 0), caFor(t, "partner.example", 0)
	store := mtls.NewStore()
	c := newClient(t, sds.ClientConfig{Target: target, Store: store})
	runClient(t, c)
	srv.nextRequest(t)
	chain, key := svid(t, own, "spiffe://example.org/myservice", time.Hour)
	srv.responses <- response(t, "1", "n1", keyAndChain(t, chain, key), spiffeRootCA(t, map[string][]*x509.Certificate{
		"example.org":     {own.Root()},
		"partner.example": {partner.Root()},
	}))
	if ack := srv.nextRequest(t); ack.GetErrorDetail() != nil {
		t.Fatalf("NACK: %v", ack.GetErrorDetail())
	}
	snap := waitReady(t, store)
	if tds := snap.TrustDomains(); strings.Join(tds, ",") != "example.org,partner.example" {
		t.Fatalf("trust domains %v", tds)
	}
	peerChain, _ := svid(t, partner, "spiffe://partner.example/ns/default/sa/api", time.Hour)
	if id, err := mtls.VerifyPeer(peerChain, snap, time.Now()); err != nil || id.String() != "spiffe://partner.example/ns/default/sa/api" {
		t.Fatalf("federated peer: %v %v", id, err)
	}
	if c.SecondsUntilExpiry() < 3000 {
		t.Errorf("SecondsUntilExpiry %v", c.SecondsUntilExpiry())
	}
}

func TestParseValidationContextShapes(t *testing.T) {
	root := caFor(t, "example.org", 0).Root()
	td := spiffeid.RequireTrustDomainFromString("example.org")
	withCfg := func(name string, cfg proto.Message) *tlsv3.Secret {
		return &tlsv3.Secret{Name: sds.RootCAResource, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			CustomValidatorConfig: &corev3.TypedExtensionConfig{Name: name, TypedConfig: anySecretConfig(t, cfg)},
		}}}
	}
	good := &tlsv3.SPIFFECertValidatorConfig{TrustDomains: []*tlsv3.SPIFFECertValidatorConfig_TrustDomain{{Name: "example.org", TrustBundle: inlineDS(mtls.EncodeCertificatesPEM([]*x509.Certificate{root}))}}}
	tests := []struct {
		name   string
		secret *tlsv3.Secret
		td     spiffeid.TrustDomain
		want   string // "" = success
	}{
		{"plain", plainRootCA(root), td, ""},
		{"plain without a known trust domain", plainRootCA(root), spiffeid.TrustDomain{}, "needs the workload's trust domain"},
		{"SPIFFE validator", withCfg(sds.SPIFFEValidatorName, good), spiffeid.TrustDomain{}, ""},
		{"another validator", withCfg("envoy.tls.cert_validator.default", good), td, "is not envoy.tls.cert_validator.spiffe"},
		{"wrong typed_config", withCfg(sds.SPIFFEValidatorName, &tlsv3.TlsCertificate{}), td, "typed_config"},
		{"bundle map", withCfg(sds.SPIFFEValidatorName, &tlsv3.SPIFFECertValidatorConfig{TrustBundles: inlineDS([]byte("{}"))}), td, "trust_bundles"},
		{"no trust domains", withCfg(sds.SPIFFEValidatorName, &tlsv3.SPIFFECertValidatorConfig{}), td, "no trust_domains"},
		{"bad trust domain name", withCfg(sds.SPIFFEValidatorName, &tlsv3.SPIFFECertValidatorConfig{TrustDomains: []*tlsv3.SPIFFECertValidatorConfig_TrustDomain{{Name: "Example.ORG", TrustBundle: inlineDS(nil)}}}), td, `"Example.ORG"`},
		{"empty", &tlsv3.Secret{Name: sds.RootCAResource, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{}}}, td, "neither trusted_ca"},
	}
	for _, tc := range tests {
		bundles, err := sds.ParseValidationContext(tc.secret, tc.td)
		if tc.want == "" {
			if err != nil || len(bundles) != 1 || bundles[0].TrustDomain() != td || !bundles[0].HasX509Authority(root) {
				t.Errorf("%s: %v, %v", tc.name, bundles, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}
