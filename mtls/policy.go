package mtls

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Mode says whether an inbound port also accepts plaintext.
type Mode int

const (
	// Strict accepts only mutual TLS; plaintext is refused. The zero Mode.
	Strict Mode = iota
	// Permissive accepts mutual TLS and plaintext, told apart by the first
	// bytes (DetectTLS); plaintext connections have no peer identity.
	Permissive
)

// String returns "STRICT" or "PERMISSIVE".
func (m Mode) String() string {
	switch m {
	case Strict:
		return "STRICT"
	case Permissive:
		return "PERMISSIVE"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "STRICT" or "PERMISSIVE" (any case).
func ParseMode(s string) (Mode, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "STRICT":
		return Strict, nil
	case "PERMISSIVE":
		return Permissive, nil
	}
	return 0, fmt.Errorf("mtls: mode %q: want STRICT or PERMISSIVE", s)
}

// DetectTLS reports whether the first bytes of a connection start a TLS
// handshake record (content type 22, protocol major version 3), as a
// ClientHello does. It needs at least 2 bytes; fewer report false.
func DetectTLS(first []byte) bool {
	return len(first) >= 2 && first[0] == 0x16 && first[1] == 0x03
}

// Policy is the authorization of one inbound port. A verified peer is
// allowed when it matches any entry of IDs, Namespaces or TrustDomains; when
// all three are empty every verified peer is allowed (the mesh's default:
// authenticated, not restricted).
type Policy struct {
	// Mode is STRICT (the zero value) or PERMISSIVE.
	Mode Mode
	// IDs are SPIFFE IDs allowed exactly.
	IDs []spiffeid.ID
	// Namespaces allow every peer whose ID is /ns/<namespace>/sa/<any>, in
	// any trust domain the store trusts.
	Namespaces []string
	// TrustDomains allow every peer of these trust domains.
	TrustDomains []spiffeid.TrustDomain
}

// Allow returns nil if the policy allows the verified peer, or an error
// naming the peer and the allow lists it matched none of.
func (p *Policy) Allow(peer spiffeid.ID) error {
	if len(p.IDs) == 0 && len(p.Namespaces) == 0 && len(p.TrustDomains) == 0 {
		return nil
	}
	if slices.Contains(p.IDs, peer) || slices.Contains(p.TrustDomains, peer.TrustDomain()) {
		return nil
	}
	if w, err := WorkloadFromID(peer); err == nil && slices.Contains(p.Namespaces, w.Namespace) {
		return nil
	}
	return fmt.Errorf("mtls: %s is not allowed: matches none of %s", peer, p.describe())
}

// AdmitPlaintext returns nil if the policy's mode accepts a plaintext
// connection, or an error saying STRICT refuses it.
func (p *Policy) AdmitPlaintext() error {
	if p.Mode == Permissive {
		return nil
	}
	return fmt.Errorf("mtls: plaintext refused: mode is %s (mutual TLS required)", p.Mode)
}

func (p *Policy) describe() string {
	var parts []string
	if len(p.IDs) > 0 {
		ids := make([]string, len(p.IDs))
		for i, id := range p.IDs {
			ids[i] = id.String()
		}
		parts = append(parts, "ids ["+strings.Join(ids, " ")+"]")
	}
	if len(p.Namespaces) > 0 {
		parts = append(parts, "namespaces ["+strings.Join(p.Namespaces, " ")+"]")
	}
	if len(p.TrustDomains) > 0 {
		tds := make([]string, len(p.TrustDomains))
		for i, td := range p.TrustDomains {
			tds[i] = td.Name()
		}
		parts = append(parts, "trust domains ["+strings.Join(tds, " ")+"]")
	}
	return strings.Join(parts, ", ")
}

// PortPolicies maps inbound ports to their Policy; ports without an entry
// get Default.
type PortPolicies struct {
	// Default applies to ports not in Ports.
	Default Policy
	// Ports holds per-port policies, keyed by the original destination port.
	Ports map[int]Policy
}

// For returns the policy of port.
func (pp *PortPolicies) For(port int) Policy {
	if p, ok := pp.Ports[port]; ok {
		return p
	}
	return pp.Default
}

// Authorize applies the policy of port to a verified peer; its signature
// fits ServerOptions.Authorize.
func (pp *PortPolicies) Authorize(port int, peer spiffeid.ID) error {
	p := pp.For(port)
	if err := p.Allow(peer); err != nil {
		return fmt.Errorf("port %d: %w", port, err)
	}
	return nil
}
