package mtls

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// Store holds the workload's current certificate (key and chain) and the
// trust bundles its peers are verified against. Every change publishes a new
// immutable Snapshot with one atomic pointer swap: handshakes read the
// current snapshot without a lock, so readers never block writers nor each
// other, and a handshake sees a certificate and bundles that belong together.
//
// The zero Store is not usable; call NewStore.
type Store struct {
	mu  sync.Mutex // serializes writers; readers never take it
	cur atomic.Pointer[Snapshot]
}

// NewStore returns an empty store: no certificate, no bundles (version 0).
func NewStore() *Store {
	s := &Store{}
	s.cur.Store(&Snapshot{bundles: map[spiffeid.TrustDomain]*x509bundle.Bundle{}, superseded: make(chan struct{})})
	return s
}

// Snapshot is one generation of a Store's content. It is never modified after
// it is published; its fields, and the bundles its methods return, are
// shared by every reader and must be treated as read-only.
type Snapshot struct {
	// Certificate is the workload certificate (chain and private key, with
	// Leaf parsed), or nil before the first one arrived.
	Certificate *tls.Certificate
	// ID is the SPIFFE ID in Certificate's leaf (zero without a certificate).
	ID spiffeid.ID
	// Version counts the store's updates; the empty store is version 0.
	Version uint64

	bundles    map[spiffeid.TrustDomain]*x509bundle.Bundle
	superseded chan struct{}
}

// Ready reports whether the snapshot has both a certificate and at least one
// trust bundle, i.e. whether it can serve and verify mutual TLS.
func (s *Snapshot) Ready() bool { return s.Certificate != nil && len(s.bundles) > 0 }

// NotAfter is the expiry of the leaf certificate (zero without one).
func (s *Snapshot) NotAfter() time.Time {
	if s.Certificate == nil {
		return time.Time{}
	}
	return s.Certificate.Leaf.NotAfter
}

// NotBefore is the start of the leaf certificate's validity (zero without one).
func (s *Snapshot) NotBefore() time.Time {
	if s.Certificate == nil {
		return time.Time{}
	}
	return s.Certificate.Leaf.NotBefore
}

// Superseded returns a channel that is closed when a newer snapshot replaces
// this one: a lock-free way to wait for the next change.
func (s *Snapshot) Superseded() <-chan struct{} { return s.superseded }

// Bundles returns the trust bundles, ordered by trust domain name.
func (s *Snapshot) Bundles() []*x509bundle.Bundle {
	out := make([]*x509bundle.Bundle, 0, len(s.bundles))
	for _, b := range s.bundles {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b *x509bundle.Bundle) int { return a.TrustDomain().Compare(b.TrustDomain()) })
	return out
}

// TrustDomains returns the names of the trust domains with a bundle, sorted.
func (s *Snapshot) TrustDomains() []string {
	out := make([]string, 0, len(s.bundles))
	for td := range s.bundles {
		out = append(out, td.Name())
	}
	slices.Sort(out)
	return out
}

// GetX509BundleForTrustDomain implements x509bundle.Source over the
// snapshot's bundles, so x509svid.Verify can use a snapshot directly.
func (s *Snapshot) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	b, ok := s.bundles[td]
	if !ok {
		return nil, fmt.Errorf("mtls: no trust bundle for trust domain %q (trusted: %s)", td.Name(), trustedList(s))
	}
	return b, nil
}

func trustedList(s *Snapshot) string {
	tds := s.TrustDomains()
	if len(tds) == 0 {
		return "none yet"
	}
	return strings.Join(tds, ", ")
}

// Current returns the current snapshot. It never blocks.
func (s *Store) Current() *Snapshot { return s.cur.Load() }

// Update is a change to a Store: a new certificate, new bundles, or both at
// once (so a handshake never sees one without the other).
type Update struct {
	// Chain is the new certificate chain, leaf first; nil keeps the current
	// certificate. The leaf must carry exactly one SPIFFE ID URI SAN.
	Chain []*x509.Certificate
	// Key is the private key of Chain's leaf; required with Chain.
	Key crypto.Signer
	// Bundles replaces all trust bundles (one per trust domain); nil keeps
	// the current ones.
	Bundles []*x509bundle.Bundle
}

// Update validates u and publishes a new snapshot. It returns the snapshot
// now current and whether anything changed: an update identical to the
// current content (a re-delivered certificate or bundle) publishes nothing.
func (s *Store) Update(u Update) (*Snapshot, bool, error) {
	var (
		cert *tls.Certificate
		id   spiffeid.ID
	)
	if u.Chain != nil {
		var err error
		if cert, id, err = certificateFromChain(u.Chain, u.Key); err != nil {
			return nil, false, err
		}
	}
	var bundles map[spiffeid.TrustDomain]*x509bundle.Bundle
	if u.Bundles != nil {
		if len(u.Bundles) == 0 {
			return nil, false, errors.New("mtls: store update: empty list of trust bundles")
		}
		bundles = make(map[spiffeid.TrustDomain]*x509bundle.Bundle, len(u.Bundles))
		for _, b := range u.Bundles {
			if b == nil || b.Empty() {
				return nil, false, errors.New("mtls: store update: a trust bundle has no X.509 authorities")
			}
			if _, dup := bundles[b.TrustDomain()]; dup {
				return nil, false, fmt.Errorf("mtls: store update: two trust bundles for trust domain %q", b.TrustDomain().Name())
			}
			bundles[b.TrustDomain()] = b.Clone()
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cur.Load()
	next := &Snapshot{
		Certificate: old.Certificate,
		ID:          old.ID,
		Version:     old.Version + 1,
		bundles:     old.bundles,
		superseded:  make(chan struct{}),
	}
	changed := false
	if cert != nil && !sameChain(old.Certificate, cert) {
		next.Certificate, next.ID, changed = cert, id, true
	}
	if bundles != nil && !sameBundles(old.bundles, bundles) {
		next.bundles, changed = bundles, true
	}
	if !changed {
		return old, false, nil
	}
	s.cur.Store(next)
	close(old.superseded)
	return next, true, nil
}

// SetCertificate replaces the certificate; see Update.
func (s *Store) SetCertificate(chain []*x509.Certificate, key crypto.Signer) error {
	_, _, err := s.Update(Update{Chain: chain, Key: key})
	return err
}

// SetBundles replaces the trust bundles; see Update.
func (s *Store) SetBundles(bundles ...*x509bundle.Bundle) error {
	if bundles == nil {
		bundles = []*x509bundle.Bundle{}
	}
	_, _, err := s.Update(Update{Bundles: bundles})
	return err
}

// WaitReady blocks until the store holds a certificate and a trust bundle
// (Snapshot.Ready), or ctx ends.
func (s *Store) WaitReady(ctx context.Context) (*Snapshot, error) {
	for {
		snap := s.Current()
		if snap.Ready() {
			return snap, nil
		}
		select {
		case <-snap.Superseded():
		case <-ctx.Done():
			return nil, fmt.Errorf("mtls: waiting for a certificate and trust bundle (have certificate: %t, bundles: %s): %w",
				snap.Certificate != nil, trustedList(snap), ctx.Err())
		}
	}
}

// certificateFromChain checks that key belongs to the leaf and that the leaf
// names one SPIFFE ID, and assembles the tls.Certificate handshakes serve.
func certificateFromChain(chain []*x509.Certificate, key crypto.Signer) (*tls.Certificate, spiffeid.ID, error) {
	if len(chain) == 0 || chain[0] == nil {
		return nil, spiffeid.ID{}, errors.New("mtls: store update: empty certificate chain")
	}
	leaf := chain[0]
	id, err := x509svid.IDFromCert(leaf)
	if err != nil {
		return nil, spiffeid.ID{}, fmt.Errorf("mtls: store update: leaf %q: %w", leaf.Subject, err)
	}
	if key == nil {
		return nil, spiffeid.ID{}, fmt.Errorf("mtls: store update: certificate %s has no private key", id)
	}
	if !publicKeysEqual(leaf.PublicKey, key.Public()) {
		return nil, spiffeid.ID{}, fmt.Errorf("mtls: store update: private key does not match the public key of certificate %s", id)
	}
	cert := &tls.Certificate{PrivateKey: key, Leaf: leaf}
	for _, c := range chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	return cert, id, nil
}

// publicKeysEqual compares public keys of the standard library's key types,
// which all implement Equal.
func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

func sameChain(a, b *tls.Certificate) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.EqualFunc(a.Certificate, b.Certificate, bytes.Equal)
}

func sameBundles(a, b map[spiffeid.TrustDomain]*x509bundle.Bundle) bool {
	if len(a) != len(b) {
		return false
	}
	for td, ba := range a {
		if bb, ok := b[td]; !ok || !ba.Equal(bb) {
			return false
		}
	}
	return true
}
