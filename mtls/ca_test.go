package mtls

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

func TestSignCSR(t *testing.T) {
	web := mustID(t, "spiffe://cluster.local/ns/default/sa/web")
	other := mustID(t, "spiffe://cluster.local/ns/default/sa/db")
	foreign := mustID(t, "spiffe://example.org/ns/default/sa/web")

	csrFor := func(t *testing.T, tmpl *x509.CertificateRequest) *x509.CertificateRequest {
		key, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			t.Fatal(err)
		}
		csr, err := ParseCSR(der)
		if err != nil {
			t.Fatal(err)
		}
		return csr
	}
	for _, intermediate := range []bool{false, true} {
		ca := testCA(t, "cluster.local", intermediate, 0)
		tests := []struct {
			name    string
			csr     *x509.CertificateRequest
			id      spiffeid.ID
			ttl     time.Duration
			wantTTL time.Duration
			wantErr []string // substrings; nil = success
		}{
			{name: "default TTL", csr: &x509.CertificateRequest{URIs: []*url.URL{web.URL()}}, id: web, wantTTL: DefaultWorkloadTTL},
			{name: "explicit TTL", csr: &x509.CertificateRequest{URIs: []*url.URL{web.URL()}}, id: web, ttl: 2 * time.Second, wantTTL: 2 * time.Second},
			{name: "SAN for another identity", csr: &x509.CertificateRequest{URIs: []*url.URL{other.URL()}}, id: web,
				wantErr: []string{"URI:" + other.String(), "does not match the proven identity " + web.String()}},
			{name: "extra DNS SAN", csr: &x509.CertificateRequest{URIs: []*url.URL{web.URL()}, DNSNames: []string{"evil.example"}}, id: web,
				wantErr: []string{"DNS:evil.example", web.String()}},
			{name: "no SAN", csr: &x509.CertificateRequest{}, id: web, wantErr: []string{"SAN (none)", web.String()}},
			{name: "two URI SANs", csr: &x509.CertificateRequest{URIs: []*url.URL{web.URL(), other.URL()}}, id: web, wantErr: []string{other.String()}},
			{name: "other trust domain", csr: &x509.CertificateRequest{URIs: []*url.URL{foreign.URL()}}, id: foreign,
				wantErr: []string{foreign.String(), `not in the CA's trust domain "cluster.local"`}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				before := time.Now()
				chain, err := ca.SignCSR(csrFor(t, tc.csr), tc.id, tc.ttl)
				if tc.wantErr != nil {
					if err == nil {
						t.Fatalf("signed %v; want an error", chain[0].URIs)
					}
					for _, w := range tc.wantErr {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("error %q does not contain %q", err, w)
						}
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				wantLen := 1
				if intermediate {
					wantLen = 2
				}
				if len(chain) != wantLen {
					t.Fatalf("chain has %d certificates, want %d", len(chain), wantLen)
				}
				leaf := chain[0]
				if len(leaf.URIs) != 1 || leaf.URIs[0].String() != tc.id.String() || len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 {
					t.Errorf("leaf SANs: URIs %v DNS %v IP %v email %v; want only %s", leaf.URIs, leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses, tc.id)
				}
				if leaf.IsCA {
					t.Error("leaf is a CA")
				}
				// x509 times have second precision; allow for that and the backdate.
				if got := leaf.NotAfter.Sub(before); got < tc.wantTTL-time.Second || got > tc.wantTTL+time.Second {
					t.Errorf("leaf lives %v after signing, want about %v", got, tc.wantTTL)
				}
				if leaf.NotBefore.After(before) {
					t.Errorf("NotBefore %v is after the signing time %v", leaf.NotBefore, before)
				}
				id, _, err := x509svid.Verify(chain, ca.Bundle())
				if err != nil || id != tc.id {
					t.Errorf("chain does not verify against the CA bundle: %v, %v", id, err)
				}
				if _, _, err := x509svid.Verify(chain, testCA(t, "cluster.local", false, 0).Bundle()); err == nil {
					t.Error("chain verifies against another CA's bundle")
				}
			})
		}
	}
}

func TestSignCSRRefusesWeakKeyAndClampsTTL(t *testing.T) {
	web := mustID(t, "spiffe://cluster.local/ns/default/sa/web")
	ca := testCA(t, "cluster.local", false, 0)
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{web.URL()}}, weak)
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.SignCSR(csr, web, 0); err == nil || !strings.Contains(err.Error(), "1024 bits") {
		t.Errorf("1024-bit RSA CSR: err = %v", err)
	}
	chain, _ := issue(t, ca, web, 100*365*24*time.Hour)
	if chain[0].NotAfter.After(ca.Root().NotAfter) {
		t.Errorf("leaf NotAfter %v outlives the root %v", chain[0].NotAfter, ca.Root().NotAfter)
	}
}

func TestNewCARefuses(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("cluster.local")
	good, err := GenerateCAMaterial(CAOptions{TrustDomain: td, Intermediate: true})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := GenerateCAMaterial(CAOptions{TrustDomain: td})
	old, _ := GenerateCAMaterial(CAOptions{TrustDomain: td, RootTTL: time.Hour, Now: func() time.Time { return time.Now().Add(-48 * time.Hour) }})
	tests := []struct {
		name string
		td   string
		m    *CAMaterial
		want string
	}{
		{"trust domain differs", "example.org", good, `not trust domain "example.org"`},
		{"key of another CA", "cluster.local", &CAMaterial{RootCert: good.RootCert, RootKey: other.RootKey}, "does not match"},
		{"intermediate of another root", "cluster.local", &CAMaterial{RootCert: other.RootCert, IntermediateCert: good.IntermediateCert, IntermediateKey: good.IntermediateKey}, "is not signed by root"},
		{"no key", "cluster.local", &CAMaterial{RootCert: good.RootCert}, "no private key"},
		{"expired", "cluster.local", old, "rotate the CA material"},
		{"garbage", "cluster.local", &CAMaterial{RootCert: []byte("not pem")}, "no PEM CERTIFICATE"},
	}
	for _, tc := range tests {
		_, err := NewCA(spiffeid.RequireTrustDomainFromString(tc.td), tc.m, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	ca, err := NewCA(td, good, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Bundle().HasX509Authority(ca.Root()) || len(ca.Bundle().X509Authorities()) != 1 {
		t.Error("Bundle() is not exactly the root")
	}
}
