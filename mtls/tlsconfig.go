package mtls

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// ALPN protocol names between sidecars: the receiving sidecar learns from the
// handshake whether the stream carries HTTP/2 or opaque TCP. Both are
// meshlet's own names (Istio's "istio-h2" idea), so an inbound listener in
// PERMISSIVE mode tells a peer sidecar's ClientHello from the app's own TLS
// clients, which offer "h2" or "http/1.1" (IsMeshALPN).
const (
	ALPNHTTP2     = "meshlet-h2"  // the stream is HTTP/2
	ALPNOpaqueTCP = "meshlet-tcp" // the stream is opaque TCP bytes
)

// IsMeshALPN reports whether a ClientHello's ALPN list offers one of the
// protocols peer sidecars use.
func IsMeshALPN(protos []string) bool {
	for _, p := range protos {
		if p == ALPNHTTP2 || p == ALPNOpaqueTCP {
			return true
		}
	}
	return false
}

// ServerOptions tunes ServerConfig. The zero value accepts any peer whose
// certificate verifies against the store's bundles.
type ServerOptions struct {
	// Authorize, if set, is called during the handshake with the local port
	// the peer connected to and its verified SPIFFE ID; an error refuses the
	// peer. PortPolicies.Authorize fits.
	Authorize func(localPort int, peer spiffeid.ID) error
	// NextProtos are the ALPN protocols accepted; default ALPNHTTP2 and
	// ALPNOpaqueTCP.
	NextProtos []string
	// Now is the clock certificates are checked against; default time.Now.
	Now func() time.Time
}

// ServerConfig returns the TLS configuration of a sidecar's inbound listener.
// Each handshake takes the store's current snapshot: its certificate is
// served and the client's certificate, which is required, is verified
// against its bundles, then authorized. TLS 1.3 only. Session tickets are
// off so that every connection is verified with the current bundle and
// clock.
func ServerConfig(store *Store, opts ServerOptions) *tls.Config {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	protos := opts.NextProtos
	if protos == nil {
		protos = []string{ALPNHTTP2, ALPNOpaqueTCP}
	}
	base := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		NextProtos:             protos,
		ClientAuth:             tls.RequireAnyClientCert,
		SessionTicketsDisabled: true,
	}
	base.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		snap := store.Current()
		if snap.Certificate == nil {
			return nil, &PeerError{Reason: ReasonNoLocalCert, Err: errors.New("this sidecar has no workload certificate yet")}
		}
		port := localPort(hello.Conn)
		return &tls.Config{
			MinVersion:             tls.VersionTLS13,
			NextProtos:             protos,
			ClientAuth:             tls.RequireAnyClientCert,
			SessionTicketsDisabled: true,
			Certificates:           []tls.Certificate{*snap.Certificate},
			// Standard chain verification is off (RequireAnyClientCert): the
			// SPIFFE rules and the snapshot's bundles apply instead.
			VerifyConnection: func(cs tls.ConnectionState) error {
				id, err := VerifyPeer(cs.PeerCertificates, snap, now())
				if err != nil {
					return err
				}
				if opts.Authorize != nil {
					if err := opts.Authorize(port, id); err != nil {
						return &PeerError{Reason: ReasonNotAuthorized, ID: id, Err: err}
					}
				}
				return nil
			},
		}, nil
	}
	return base
}

// ClientOptions tunes ClientConfig.
type ClientOptions struct {
	// ServerID is the SPIFFE ID the server must present.
	ServerID spiffeid.ID
	// ServerTrustDomain, used only when ServerID is zero, accepts any
	// server of this trust domain (an endpoint whose identity the
	// configuration does not name). One of the two is required.
	ServerTrustDomain spiffeid.TrustDomain
	// NextProto is the ALPN protocol offered (ALPNHTTP2 or ALPNOpaqueTCP);
	// the server must select it. Empty offers none.
	NextProto string
	// Now is the clock certificates are checked against; default time.Now.
	Now func() time.Time
}

// ClientConfig returns the TLS configuration for dialing a peer sidecar:
// the client certificate and the bundles the server is verified against are
// read from store at handshake time, and the server must present
// opts.ServerID (or belong to opts.ServerTrustDomain). TLS 1.3 only.
func ClientConfig(store *Store, opts ClientOptions) (*tls.Config, error) {
	if opts.ServerID.IsZero() && opts.ServerTrustDomain.IsZero() {
		return nil, errors.New("mtls: client config: neither the expected server SPIFFE ID nor its trust domain is set")
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		KeyLogWriter: keyLogWriter(),
		// Hostname and web-PKI verification do not apply between sidecars;
		// VerifyConnection checks the SPIFFE ID against the current bundle.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			snap := store.Current()
			if snap.Certificate == nil {
				return nil, &PeerError{Reason: ReasonNoLocalCert, Err: errors.New("this sidecar has no workload certificate yet")}
			}
			return snap.Certificate, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := VerifyPeer(cs.PeerCertificates, store.Current(), now())
			if err != nil {
				return err
			}
			switch {
			case !opts.ServerID.IsZero() && id != opts.ServerID:
				return &PeerError{Reason: ReasonWrongID, ID: id, Err: fmt.Errorf("server presented %s, expected %s", id, opts.ServerID)}
			case opts.ServerID.IsZero() && id.TrustDomain() != opts.ServerTrustDomain:
				return &PeerError{Reason: ReasonWrongID, ID: id, Err: fmt.Errorf("server presented %s, expected a member of trust domain %q", id, opts.ServerTrustDomain.Name())}
			}
			if opts.NextProto != "" && cs.NegotiatedProtocol != opts.NextProto {
				return &PeerError{Reason: ReasonProtocolRefuse, ID: id, Err: fmt.Errorf("server selected ALPN %q, offered %q", cs.NegotiatedProtocol, opts.NextProto)}
			}
			return nil
		},
	}
	if opts.NextProto != "" {
		cfg.NextProtos = []string{opts.NextProto}
	}
	return cfg, nil
}

// localPort is the port of the connection's local address, or 0.
func localPort(c net.Conn) int {
	if c == nil {
		return 0
	}
	switch a := c.LocalAddr().(type) {
	case nil:
		return 0
	case *net.TCPAddr:
		return a.Port
	default:
		_, p, err := net.SplitHostPort(a.String())
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(p)
		return n
	}
}
