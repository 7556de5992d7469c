package testtool

import (
	"crypto"
	"crypto/x509"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/mtls"
)

// MeshCA is a new mesh CA for trust domain td whose clock is now (nil:
// time.Now), as the control plane makes one.
func MeshCA(t testing.TB, td spiffeid.TrustDomain, now func() time.Time) *mtls.CA {
	t.Helper()
	if now == nil {
		now = time.Now
	}
	m, err := mtls.GenerateCAMaterial(mtls.CAOptions{TrustDomain: td, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := mtls.NewCA(td, m, now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// Issue signs a workload certificate for id (lifetime ttl) the way SDS
// does: a new key, its CSR, the CA's signature.
func Issue(t testing.TB, ca *mtls.CA, id spiffeid.ID, ttl time.Duration) ([]*x509.Certificate, crypto.Signer) {
	t.Helper()
	key, err := mtls.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, err := mtls.NewCSR(key, id)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := mtls.ParseCSR(csrPEM)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := ca.SignCSR(csr, id, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return chain, key
}

// IdentityStore is a store holding a certificate for id from ca (Issue),
// trusting ca: a sidecar's identity once SDS has delivered it.
func IdentityStore(t testing.TB, ca *mtls.CA, id spiffeid.ID, ttl time.Duration) *mtls.Store {
	t.Helper()
	chain, key := Issue(t, ca, id, ttl)
	s := mtls.NewStore()
	if _, _, err := s.Update(mtls.Update{Chain: chain, Key: key, Bundles: []*x509bundle.Bundle{ca.Bundle()}}); err != nil {
		t.Fatal(err)
	}
	return s
}
