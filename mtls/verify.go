package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// Reason classifies why a peer was refused, for logs and metrics.
type Reason string

// Reasons a peer is refused.
const (
	ReasonNoCertificate  Reason = "no_certificate"    // the peer sent no certificate
	ReasonNoSPIFFEID     Reason = "no_spiffe_id"      // the leaf has no (or more than one) SPIFFE ID URI SAN
	ReasonNotYetValid    Reason = "not_yet_valid"     // the leaf's NotBefore is in the future
	ReasonExpired        Reason = "expired"           // the leaf's NotAfter is in the past
	ReasonUntrustedTD    Reason = "untrusted_domain"  // no trust bundle for the peer's trust domain
	ReasonUnknownCA      Reason = "unknown_authority" // the chain does not verify against the bundle
	ReasonWrongID        Reason = "wrong_id"          // a server's ID differs from the expected one
	ReasonNotAuthorized  Reason = "not_authorized"    // the policy of the port does not allow the peer
	ReasonNoLocalCert    Reason = "no_local_cert"     // this side has no certificate yet
	ReasonProtocolRefuse Reason = "alpn_mismatch"     // the server did not select the offered ALPN protocol
)

// PeerError is a refused peer: what was wrong (Reason), with which peer (ID,
// zero when it had none), and the detail.
type PeerError struct {
	// Reason classifies the refusal.
	Reason Reason
	// ID is the peer's SPIFFE ID, zero if it presented none.
	ID spiffeid.ID
	// Err is the detail.
	Err error
}

// Error says which peer was refused, why, and the detail.
func (e *PeerError) Error() string {
	if e.ID.IsZero() {
		return fmt.Sprintf("mtls: peer refused (%s): %v", e.Reason, e.Err)
	}
	return fmt.Sprintf("mtls: peer %s refused (%s): %v", e.ID, e.Reason, e.Err)
}

// Unwrap returns the detail.
func (e *PeerError) Unwrap() error { return e.Err }

// RefusalReason returns the Reason of a PeerError in err's chain, or "".
func RefusalReason(err error) Reason {
	var pe *PeerError
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return ""
}

// VerifyPeer verifies a peer's certificate chain (leaf first) as an
// X509-SVID against bundles at time now and returns the peer's SPIFFE ID.
// Validity is checked against now explicitly, so a caller passing the wall
// clock gets "expired" even where a monotonic timer would not have fired.
// Errors are *PeerError.
func VerifyPeer(chain []*x509.Certificate, bundles x509bundle.Source, now time.Time) (spiffeid.ID, error) {
	if len(chain) == 0 {
		return spiffeid.ID{}, &PeerError{Reason: ReasonNoCertificate, Err: errors.New("no certificate presented")}
	}
	leaf := chain[0]
	id, err := x509svid.IDFromCert(leaf)
	if err != nil {
		return spiffeid.ID{}, &PeerError{Reason: ReasonNoSPIFFEID, Err: fmt.Errorf("certificate (subject %q, serial %x): %w", leaf.Subject, leaf.SerialNumber, err)}
	}
	if now.Before(leaf.NotBefore) {
		return id, &PeerError{Reason: ReasonNotYetValid, ID: id, Err: fmt.Errorf("certificate not valid before %s (now %s)", leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))}
	}
	if now.After(leaf.NotAfter) {
		return id, &PeerError{Reason: ReasonExpired, ID: id, Err: fmt.Errorf("certificate expired at %s (now %s)", leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))}
	}
	if _, err := bundles.GetX509BundleForTrustDomain(id.TrustDomain()); err != nil {
		return id, &PeerError{Reason: ReasonUntrustedTD, ID: id, Err: fmt.Errorf("trust domain %q is not trusted: %w", id.TrustDomain().Name(), err)}
	}
	if _, _, err := x509svid.Verify(chain, bundles, x509svid.WithTime(now)); err != nil {
		return id, &PeerError{Reason: ReasonUnknownCA, ID: id, Err: fmt.Errorf("chain does not verify against the trust bundle of %q: %w", id.TrustDomain().Name(), err)}
	}
	return id, nil
}

// PeerID returns the SPIFFE ID of the peer of an established connection
// (already verified by a config from this package).
func PeerID(cs tls.ConnectionState) (spiffeid.ID, error) {
	if len(cs.PeerCertificates) == 0 {
		return spiffeid.ID{}, errors.New("mtls: connection has no peer certificate")
	}
	id, err := x509svid.IDFromCert(cs.PeerCertificates[0])
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("mtls: peer certificate: %w", err)
	}
	return id, nil
}
