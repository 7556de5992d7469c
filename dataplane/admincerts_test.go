package dataplane

import (
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// /certs is Envoy's admin.v3.Certificates: the workload chain with its
// SPIFFE ID and expiry, and the trust domain's root.
func TestAdminCerts(t *testing.T) {
	ca := testCA(t, 0)
	up := upstream(t, "127.0.0.11", named("a"))
	s, err := New(testConfig(noRetry, testCluster("echo", endpoint(up, "a"))),
		Options{HTTP1Server: testHTTP1Server, AccessLog: &logBuffer{}, Workers: 1, Identity: identity(t, ca, webID, 49*time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	var got adminv3.Certificates
	if err := protojson.Unmarshal([]byte(adminGet(t, s, "/certs")), &got); err != nil {
		t.Fatalf("/certs: %v", err)
	}
	if len(got.Certificates) != 1 || len(got.Certificates[0].CertChain) == 0 || len(got.Certificates[0].CaCert) == 0 {
		t.Fatalf("/certs: %v", &got)
	}
	leaf := got.Certificates[0].CertChain[0]
	if len(leaf.SubjectAltNames) == 0 || leaf.SubjectAltNames[0].GetUri() != webID.String() {
		t.Errorf("leaf SANs %v, want %s", leaf.SubjectAltNames, webID)
	}
	if d := leaf.DaysUntilExpiration; d != 2 {
		t.Errorf("days until expiration %d, want 2 (49 h)", d)
	}
	if leaf.SerialNumber == "" || !leaf.ExpirationTime.AsTime().After(leaf.ValidFrom.AsTime()) {
		t.Errorf("leaf %v", leaf)
	}
	if p := got.Certificates[0].CaCert[0].Path; p != "sds:ROOTCA:cluster.local" {
		t.Errorf("root path %q", p)
	}
}
