package mtls

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Defaults of the mesh CA.
const (
	// DefaultWorkloadTTL is the lifetime of a workload certificate.
	DefaultWorkloadTTL = 24 * time.Hour
	// DefaultRootTTL is the lifetime of a generated root.
	DefaultRootTTL = 10 * 365 * 24 * time.Hour
	// DefaultIntermediateTTL is the lifetime of a generated intermediate.
	DefaultIntermediateTTL = 5 * 365 * 24 * time.Hour
	// maxBackdate bounds how far NotBefore is set before the signing time,
	// to tolerate clock skew between the CA and the peers.
	maxBackdate = 10 * time.Second
)

// CAMaterial is the persistent form of the mesh CA, as a CAStore keeps it:
// PEM certificates and PKCS#8 PEM keys. With an intermediate, the
// intermediate signs and RootKey may be empty (the root kept offline).
type CAMaterial struct {
	// RootCert is the root certificate (PEM); required.
	RootCert []byte
	// RootKey is the root's private key (PKCS#8 PEM); required without an
	// intermediate.
	RootKey []byte
	// IntermediateCert is the signing intermediate (PEM), if any.
	IntermediateCert []byte
	// IntermediateKey is the intermediate's private key (PKCS#8 PEM).
	IntermediateKey []byte
}

// CAOptions say how to generate a CA (GenerateCAMaterial) and which trust
// domain a loaded one must belong to.
type CAOptions struct {
	// TrustDomain is the mesh's trust domain; required.
	TrustDomain spiffeid.TrustDomain
	// RootTTL is the generated root's lifetime; default DefaultRootTTL.
	RootTTL time.Duration
	// Intermediate generates an intermediate under the root, which then
	// signs workload certificates.
	Intermediate bool
	// IntermediateTTL is the intermediate's lifetime; default
	// DefaultIntermediateTTL, never past the root's expiry.
	IntermediateTTL time.Duration
	// Now is the CA's clock; default time.Now.
	Now func() time.Time
}

func (o *CAOptions) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// CA is the mesh certificate authority: it signs workload CSRs with the
// signing certificate (the intermediate if there is one, else the root) and
// publishes the root as the trust bundle. It is safe for concurrent use.
type CA struct {
	td       spiffeid.TrustDomain
	root     *x509.Certificate
	issuer   *x509.Certificate
	signer   crypto.Signer
	chain    []*x509.Certificate // appended to every leaf: the intermediate, if any
	now      func() time.Time
	material *CAMaterial
}

// GenerateCAMaterial creates a new ECDSA P-256 root (and an intermediate if
// opts.Intermediate) for opts.TrustDomain. The root carries the trust
// domain's SPIFFE ID as its URI SAN.
func GenerateCAMaterial(opts CAOptions) (*CAMaterial, error) {
	if opts.TrustDomain.IsZero() {
		return nil, errors.New("mtls: generate CA: trust domain is empty")
	}
	now := opts.now()
	rootTTL := opts.RootTTL
	if rootTTL <= 0 {
		rootTTL = DefaultRootTTL
	}
	rootKey, err := NewKey()
	if err != nil {
		return nil, err
	}
	rootTmpl := &x509.Certificate{
		SerialNumber:          mustSerial(),
		Subject:               pkix.Name{Organization: []string{"meshlet"}, CommonName: "meshlet root CA " + opts.TrustDomain.Name()},
		URIs:                  []*url.URL{opts.TrustDomain.ID().URL()},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(rootTTL),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, rootKey.Public(), rootKey)
	if err != nil {
		return nil, fmt.Errorf("mtls: generate root for %q: %w", opts.TrustDomain.Name(), err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	m := &CAMaterial{RootCert: EncodeCertificatesPEM([]*x509.Certificate{root})}
	if m.RootKey, err = EncodePrivateKeyPEM(rootKey); err != nil {
		return nil, err
	}
	if !opts.Intermediate {
		return m, nil
	}
	interTTL := opts.IntermediateTTL
	if interTTL <= 0 {
		interTTL = DefaultIntermediateTTL
	}
	notAfter := now.Add(interTTL)
	if notAfter.After(root.NotAfter) {
		notAfter = root.NotAfter
	}
	interKey, err := NewKey()
	if err != nil {
		return nil, err
	}
	interTmpl := &x509.Certificate{
		SerialNumber:          mustSerial(),
		Subject:               pkix.Name{Organization: []string{"meshlet"}, CommonName: "meshlet intermediate CA " + opts.TrustDomain.Name()},
		URIs:                  []*url.URL{opts.TrustDomain.ID().URL()},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	interDER, err := x509.CreateCertificate(rand.Reader, interTmpl, root, interKey.Public(), rootKey)
	if err != nil {
		return nil, fmt.Errorf("mtls: generate intermediate for %q: %w", opts.TrustDomain.Name(), err)
	}
	inter, _ := x509.ParseCertificate(interDER)
	m.IntermediateCert = EncodeCertificatesPEM([]*x509.Certificate{inter})
	if m.IntermediateKey, err = EncodePrivateKeyPEM(interKey); err != nil {
		return nil, err
	}
	return m, nil
}

// NewCA loads CA material for trust domain td and checks it: the root is a
// self-signed CA, the signing certificate (intermediate or root) is a CA
// chaining to the root and currently valid, its key matches, and any SPIFFE
// URI SAN on them names td. now may be nil (time.Now).
func NewCA(td spiffeid.TrustDomain, m *CAMaterial, now func() time.Time) (*CA, error) {
	if td.IsZero() {
		return nil, errors.New("mtls: load CA: trust domain is empty")
	}
	if m == nil || len(m.RootCert) == 0 {
		return nil, errors.New("mtls: load CA: no root certificate")
	}
	if now == nil {
		now = time.Now
	}
	roots, err := ParseCertificatesPEM(m.RootCert)
	if err != nil {
		return nil, fmt.Errorf("mtls: load CA root certificate: %w", err)
	}
	if len(roots) != 1 {
		return nil, fmt.Errorf("mtls: load CA: root PEM holds %d certificates, want 1", len(roots))
	}
	root := roots[0]
	if err := checkCACert("root", root, td); err != nil {
		return nil, err
	}
	if err := root.CheckSignatureFrom(root); err != nil {
		return nil, fmt.Errorf("mtls: load CA: root %q is not self-signed: %w", root.Subject, err)
	}
	ca := &CA{td: td, root: root, issuer: root, now: now, material: cloneMaterial(m)}
	keyPEM := m.RootKey
	if len(m.IntermediateCert) > 0 {
		inters, err := ParseCertificatesPEM(m.IntermediateCert)
		if err != nil {
			return nil, fmt.Errorf("mtls: load CA intermediate certificate: %w", err)
		}
		if len(inters) != 1 {
			return nil, fmt.Errorf("mtls: load CA: intermediate PEM holds %d certificates, want 1", len(inters))
		}
		inter := inters[0]
		if err := checkCACert("intermediate", inter, td); err != nil {
			return nil, err
		}
		if err := inter.CheckSignatureFrom(root); err != nil {
			return nil, fmt.Errorf("mtls: load CA: intermediate %q is not signed by root %q: %w", inter.Subject, root.Subject, err)
		}
		ca.issuer, ca.chain, keyPEM = inter, []*x509.Certificate{inter}, m.IntermediateKey
	}
	if len(keyPEM) == 0 {
		return nil, fmt.Errorf("mtls: load CA: no private key for signing certificate %q", ca.issuer.Subject)
	}
	if ca.signer, err = ParsePrivateKeyPEM(keyPEM); err != nil {
		return nil, fmt.Errorf("mtls: load CA key of %q: %w", ca.issuer.Subject, err)
	}
	if !publicKeysEqual(ca.issuer.PublicKey, ca.signer.Public()) {
		return nil, fmt.Errorf("mtls: load CA: private key does not match signing certificate %q", ca.issuer.Subject)
	}
	t := now()
	if t.After(ca.issuer.NotAfter) || t.Before(ca.issuer.NotBefore) {
		return nil, fmt.Errorf("mtls: load CA: signing certificate %q is valid %s to %s, not now (%s): rotate the CA material",
			ca.issuer.Subject, ca.issuer.NotBefore.UTC().Format(time.RFC3339), ca.issuer.NotAfter.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339))
	}
	return ca, nil
}

func checkCACert(role string, c *x509.Certificate, td spiffeid.TrustDomain) error {
	if !c.BasicConstraintsValid || !c.IsCA {
		return fmt.Errorf("mtls: load CA: %s %q is not a CA certificate", role, c.Subject)
	}
	if c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("mtls: load CA: %s %q may not sign certificates (key usage)", role, c.Subject)
	}
	for _, u := range c.URIs {
		if u.Scheme != "spiffe" {
			continue
		}
		if got, err := spiffeid.TrustDomainFromURI(u); err != nil || got != td {
			return fmt.Errorf("mtls: load CA: %s %q has URI SAN %q, not trust domain %q", role, c.Subject, u, td.Name())
		}
	}
	return nil
}

// LoadOrCreateCA returns the CA kept in store, creating and storing one when
// there is none. A CA that exists is never regenerated: if it cannot be
// loaded the error says why and nothing is written. When two replicas race,
// the one whose Create fails with ErrCAExists loads the winner's material.
// created reports whether this call generated the CA.
func LoadOrCreateCA(ctx context.Context, store CAStore, opts CAOptions) (ca *CA, created bool, err error) {
	m, err := store.Load(ctx)
	switch {
	case err == nil:
		ca, err = NewCA(opts.TrustDomain, m, opts.Now)
		return ca, false, err
	case !errors.Is(err, ErrCANotFound):
		return nil, false, err
	}
	m, err = GenerateCAMaterial(opts)
	if err != nil {
		return nil, false, err
	}
	switch err := store.Create(ctx, m); {
	case err == nil:
		created = true
	case errors.Is(err, ErrCAExists):
		if m, err = store.Load(ctx); err != nil {
			return nil, false, fmt.Errorf("mtls: another replica created the CA but it cannot be loaded: %w", err)
		}
	default:
		return nil, false, err
	}
	ca, err = NewCA(opts.TrustDomain, m, opts.Now)
	return ca, created, err
}

// TrustDomain is the CA's trust domain.
func (ca *CA) TrustDomain() spiffeid.TrustDomain { return ca.td }

// Root is the root certificate.
func (ca *CA) Root() *x509.Certificate { return ca.root }

// Material returns a copy of the CA's persistent form.
func (ca *CA) Material() *CAMaterial { return cloneMaterial(ca.material) }

// Bundle returns the trust bundle of the CA's trust domain: its root. A new
// bundle is returned on each call.
func (ca *CA) Bundle() *x509bundle.Bundle {
	return x509bundle.FromX509Authorities(ca.td, []*x509.Certificate{ca.root})
}

// SignCSR issues a workload certificate for id, which the caller has proven
// (e.g. with a ServiceAccount token), from csr. The CSR's only SAN must be
// the URI id: any other or additional SAN is refused with an error naming
// both. The certificate's only SAN is id; it is valid for ttl
// (DefaultWorkloadTTL if ttl <= 0), never past the signing certificate's
// expiry, and usable for TLS server and client authentication. The returned
// chain is the leaf followed by the intermediate, if any (not the root).
func (ca *CA) SignCSR(csr *x509.CertificateRequest, id spiffeid.ID, ttl time.Duration) ([]*x509.Certificate, error) {
	if csr == nil {
		return nil, fmt.Errorf("mtls: sign CSR for %s: no CSR", id)
	}
	if id.IsZero() {
		return nil, errors.New("mtls: sign CSR: the proven identity is empty")
	}
	if !id.MemberOf(ca.td) {
		return nil, fmt.Errorf("mtls: sign CSR for %s: not in the CA's trust domain %q", id, ca.td.Name())
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("mtls: sign CSR for %s: bad CSR signature: %w", id, err)
	}
	if sans := csrSANs(csr); len(sans) != 1 || len(csr.URIs) != 1 || csr.URIs[0].String() != id.String() {
		return nil, fmt.Errorf("mtls: sign CSR: SAN %s does not match the proven identity %s", describeSANs(sans), id)
	}
	if err := checkLeafKey(csr.PublicKey); err != nil {
		return nil, fmt.Errorf("mtls: sign CSR for %s: %w", id, err)
	}
	return ca.issue(id.String(), csr.PublicKey, ttl, func(t *x509.Certificate) {
		t.URIs = []*url.URL{id.URL()}
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	})
}

// IssueServingCertificate issues a TLS server certificate for hosts (DNS
// names or IP addresses), with a key generated here, valid for ttl
// (DefaultWorkloadTTL if ttl <= 0). The SDS server uses it.
func (ca *CA) IssueServingCertificate(hosts []string, ttl time.Duration) (*tls.Certificate, error) {
	if len(hosts) == 0 {
		return nil, errors.New("mtls: serving certificate: no host names")
	}
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	chain, err := ca.issue(strings.Join(hosts, ","), key.Public(), ttl, func(t *x509.Certificate) {
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				t.IPAddresses = append(t.IPAddresses, ip)
			} else {
				t.DNSNames = append(t.DNSNames, h)
			}
		}
		t.Subject = pkix.Name{CommonName: hosts[0]}
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	if err != nil {
		return nil, err
	}
	cert := &tls.Certificate{PrivateKey: key, Leaf: chain[0]}
	for _, c := range chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	return cert, nil
}

func (ca *CA) issue(what string, pub crypto.PublicKey, ttl time.Duration, fill func(*x509.Certificate)) ([]*x509.Certificate, error) {
	if ttl <= 0 {
		ttl = DefaultWorkloadTTL
	}
	now := ca.now()
	if now.After(ca.issuer.NotAfter) {
		return nil, fmt.Errorf("mtls: issue certificate for %s: CA certificate %q expired at %s", what, ca.issuer.Subject, ca.issuer.NotAfter.UTC().Format(time.RFC3339))
	}
	backdate := min(maxBackdate, ttl/4)
	tmpl := &x509.Certificate{
		SerialNumber:          mustSerial(),
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(ttl),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
	}
	if _, isRSA := pub.(*rsa.PublicKey); isRSA {
		tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
	}
	if tmpl.NotAfter.After(ca.issuer.NotAfter) {
		tmpl.NotAfter = ca.issuer.NotAfter
	}
	fill(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.issuer, pub, ca.signer)
	if err != nil {
		return nil, fmt.Errorf("mtls: issue certificate for %s: %w", what, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("mtls: parse issued certificate for %s: %w", what, err)
	}
	return append([]*x509.Certificate{leaf}, ca.chain...), nil
}

func checkLeafKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Errorf("ECDSA curve %s not accepted (P-256 or P-384)", k.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("RSA key of %d bits is too small (at least 2048)", k.N.BitLen())
		}
	case ed25519.PublicKey:
	default:
		return fmt.Errorf("public key type %T not accepted", pub)
	}
	return nil
}

func csrSANs(csr *x509.CertificateRequest) []string {
	var sans []string
	for _, u := range csr.URIs {
		sans = append(sans, "URI:"+u.String())
	}
	for _, d := range csr.DNSNames {
		sans = append(sans, "DNS:"+d)
	}
	for _, ip := range csr.IPAddresses {
		sans = append(sans, "IP:"+ip.String())
	}
	for _, e := range csr.EmailAddresses {
		sans = append(sans, "email:"+e)
	}
	return sans
}

func describeSANs(sans []string) string {
	if len(sans) == 0 {
		return "(none)"
	}
	return "[" + strings.Join(sans, " ") + "]"
}

func mustSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("mtls: crypto/rand failed: " + err.Error())
	}
	return n.Add(n, big.NewInt(1))
}

func cloneMaterial(m *CAMaterial) *CAMaterial {
	c := func(b []byte) []byte { return append([]byte(nil), b...) }
	return &CAMaterial{RootCert: c(m.RootCert), RootKey: c(m.RootKey), IntermediateCert: c(m.IntermediateCert), IntermediateKey: c(m.IntermediateKey)}
}
