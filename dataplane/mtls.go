package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h2"
	"github.com/meshlet-dev/meshlet/dataplane/internal/logsink"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
	"github.com/meshlet-dev/meshlet/dataplane/internal/stats"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/accesslog"
	"github.com/meshlet-dev/meshlet/lb/respflag"
	"github.com/meshlet-dev/meshlet/mtls"
)

// handshakeTimeout bounds an inbound mTLS handshake (Envoy's listener
// transport_socket_connect_timeout, which Istio sets to 10 s).
const handshakeTimeout = 10 * time.Second

// inboundBuffer holds a whole TLS record, so a ClientHello can be read
// before deciding what the connection is.
const inboundBuffer = 5 + 16<<10

// buildPolicies turns an inbound listener's mtls section into the
// authorization mtls applies (PERMISSIVE, everyone verified allowed, when
// the section is absent).
func buildPolicies(m *config.InboundMTLS) *mtls.PortPolicies {
	if m == nil {
		return &mtls.PortPolicies{Default: mtls.Policy{Mode: mtls.Permissive}}
	}
	pp := &mtls.PortPolicies{Default: policyOf(m.PeerAuthorization)}
	for port, pa := range m.Ports {
		if pp.Ports == nil {
			pp.Ports = map[int]mtls.Policy{}
		}
		pp.Ports[int(port)] = policyOf(pa)
	}
	return pp
}

// policyOf converts validated configuration (config.Validate parsed every
// ID) into an mtls.Policy.
func policyOf(pa config.PeerAuthorization) mtls.Policy {
	p := mtls.Policy{Mode: mtls.Permissive, Namespaces: pa.Namespaces}
	if pa.Mode == config.MTLSStrict {
		p.Mode = mtls.Strict
	}
	for _, s := range pa.Principals {
		p.IDs = append(p.IDs, spiffeid.RequireFromString(s))
	}
	for _, s := range pa.TrustDomains {
		p.TrustDomains = append(p.TrustDomains, spiffeid.RequireTrustDomainFromString(s))
	}
	return p
}

// serveInbound runs an inbound connection of a sidecar that has a workload
// identity: a peer sidecar's ClientHello (meshlet's ALPN names) is
// terminated, verified and authorized, then carries HTTP/2 or opaque TCP
// to the app; anything else is plaintext, refused on a STRICT port and
// handled as without mTLS on a PERMISSIVE one.
func (w *worker) serveInbound(c *net.TCPConn, st *state, ls *listenerState, info connInfo) {
	br := bufio.NewReaderSize(rawio.IO(c), inboundBuffer)
	pol := ls.policies.For(int(info.dst.Port()))
	_ = c.SetReadDeadline(time.Now().Add(ls.cfg.DetectionTimeout))
	var mesh bool
	if pol.Mode == mtls.Strict {
		// Whatever a ClientHello offers, only mutual TLS gets in: no need
		// to parse it before the handshake does.
		hdr, err := br.Peek(5)
		mesh = err == nil && mtls.DetectTLS(hdr)
	} else {
		_, mesh = sniffClientHello(br)
	}
	_ = c.SetReadDeadline(time.Time{})
	if !mesh {
		if err := pol.AdmitPlaintext(); err != nil {
			w.s.mtlsStats.count("inbound", "plaintext_refused")
			w.logConnRefused(info, "filter_chain_not_found", err.Error())
			c.Close()
			return
		}
		w.dispatch(c, br, st, ls, info)
		return
	}
	tc := tls.Server(&sniffedConn{TCPConn: c, r: br, w: rawio.IO(c), info: info}, ls.tlsConfig)
	ctx, cancel := context.WithTimeout(w.s.ctx, handshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		reason := string(mtls.RefusalReason(err))
		if reason == "" {
			reason = "handshake_error"
		}
		w.s.mtlsStats.count("inbound", reason)
		var pe *mtls.PeerError
		if errors.As(err, &pe) && !pe.ID.IsZero() {
			info.peer = pe.ID.String() // who was refused
		}
		w.logConnRefused(info, "downstream_tls_handshake_failed", "TLS_error: "+err.Error())
		c.Close()
		return
	}
	w.s.mtlsStats.count("inbound", "ok")
	cs := tc.ConnectionState()
	if id, err := mtls.PeerID(cs); err == nil {
		info.peer = id.String()
	}
	info.mtls = true
	switch cs.NegotiatedProtocol {
	case mtls.ALPNHTTP2:
		info.h2 = &h2Conn{conn: tc}
		w.meshH2.ServeConn(context.WithValue(w.s.ctx, connInfoKey{}, info), tc)
		tc.Close()
	default: // ALPNOpaqueTCP, or none offered: opaque bytes
		w.proxyTCP(tc, st, ls, info, nil)
	}
}

// sniffClientHello peeks at the first record: whether it is a TLS
// handshake, and whether its ClientHello offers meshlet's ALPN names. A
// ClientHello that cannot be read whole from the first record counts as
// TLS from a client that is not a peer sidecar.
func sniffClientHello(br *bufio.Reader) (isTLS, mesh bool) {
	hdr, err := br.Peek(5)
	if err != nil || !mtls.DetectTLS(hdr) {
		return false, false
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	rec, err := br.Peek(5 + n)
	if err != nil {
		return true, false
	}
	hello := parseClientHello(rec)
	return true, hello != nil && mtls.IsMeshALPN(hello.SupportedProtos)
}

var errHelloRead = errors.New("client hello read")

// parseClientHello lets crypto/tls parse a ClientHello record (its answer
// goes nowhere) and returns what it read, or nil.
func parseClientHello(rec []byte) *tls.ClientHelloInfo {
	var hello *tls.ClientHelloInfo
	conn := &replayConn{r: bytes.NewReader(rec)}
	_ = tls.Server(conn, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		hello = h
		return nil, errHelloRead
	}}).Handshake()
	return hello
}

// replayConn is a net.Conn that reads from a buffer and discards writes.
type replayConn struct{ r *bytes.Reader }

func (c *replayConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }

// logConnRefused writes the access-log line of an inbound connection
// refused before it reached a route.
func (w *worker) logConnRefused(info connInfo, details, failure string) {
	e := accesslog.Entry{StartTime: info.start, UpstreamServiceTime: -1, Duration: time.Since(info.start)}
	if details == "filter_chain_not_found" {
		e.Flags |= respflag.NR
	}
	w.s.access.Load().Write(w.id, &e, logsink.Extra{Details: details, Failure: failure, DownstreamPeer: info.peer})
}

// meshed reports whether h is reached with mutual TLS by this sidecar:
// the endpoint runs a sidecar and this one has a workload identity.
func (w *worker) meshed(h *lb.Host) bool {
	return w.s.opts.Identity != nil && h.Metadata[config.MetadataMeshed] == "true"
}

// dialHost opens an upstream connection to h: plain TCP, or for a meshed
// endpoint mutual TLS offering alpn, the server's SPIFFE ID checked
// against the endpoint's identity (or the local trust domain when the
// configuration names none). A failed handshake is a connect failure
// (UF), as in Envoy, with the TLS error as the transport failure reason.
func (w *worker) dialHost(ctx context.Context, c *cluster, h *lb.Host, alpn string) (net.Conn, error) {
	return w.dialHostAt(ctx, c, h, h.Address, alpn)
}

// dialHostAt is dialHost at addr, h's address or, for a passthrough
// endpoint, the one upstreamAddr made of it.
func (w *worker) dialHostAt(ctx context.Context, c *cluster, h *lb.Host, addr, alpn string) (net.Conn, error) {
	conn, err := w.dial(ctx, c, addr)
	if err != nil || !w.meshed(h) {
		return conn, err
	}
	cfg, err := w.clientTLS(h.Metadata[config.MetadataIdentity], alpn)
	if err != nil {
		conn.Close()
		return nil, &connectError{addr: h.Address, err: err, tls: true}
	}
	hctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(hctx); err != nil {
		conn.Close()
		reason := string(mtls.RefusalReason(err))
		if reason == "" {
			reason = "handshake_error"
		}
		w.s.mtlsStats.count("outbound", reason)
		c.stats[w.id].Inc(stats.UpstreamCxConnectFail)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &connectError{addr: h.Address, err: err, tls: true, timeout: rawio.IsDeadline(err)}
	}
	w.s.mtlsStats.count("outbound", "ok")
	return tc, nil
}

// clientTLS returns this worker's client TLS config for a peer identity
// and ALPN protocol (configs read the certificate at handshake time, so
// they are cached for good).
func (w *worker) clientTLS(identity, alpn string) (*tls.Config, error) {
	k := [2]string{identity, alpn}
	w.mu.Lock()
	cfg := w.tlsConfigs[k]
	w.mu.Unlock()
	if cfg != nil {
		return cfg, nil
	}
	opts := mtls.ClientOptions{NextProto: alpn}
	if identity != "" {
		id, err := spiffeid.FromString(identity)
		if err != nil {
			return nil, fmt.Errorf("endpoint identity %q: %w", identity, err)
		}
		opts.ServerID = id
	} else {
		id := w.s.opts.Identity.Current().ID
		if id.IsZero() {
			return nil, errors.New("this sidecar has no workload certificate yet")
		}
		opts.ServerTrustDomain = id.TrustDomain() // not cached: the domain comes from the certificate
		return mtls.ClientConfig(w.s.opts.Identity, opts)
	}
	cfg, err := mtls.ClientConfig(w.s.opts.Identity, opts)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.tlsConfigs[k] = cfg
	w.mu.Unlock()
	return cfg, nil
}

// transportKind tells a cluster's connection pools apart on a worker.
type transportKind uint8

const (
	// transportPlain is the cluster's own protocol (HTTP/1.1 or h2c).
	transportPlain transportKind = iota
	// transportMesh is HTTP/2 over mutual TLS to meshed endpoints, one
	// multiplexed connection (more when streams run out) per endpoint.
	transportMesh
	// transportPlainH2 is h2c whatever the cluster's protocol: a gRPC
	// request to an HTTP/1.1 cluster (gRPC is HTTP/2 only; Envoy's
	// inbound clusters follow the downstream protocol, and meshlet's
	// sidecars carry every request between them over HTTP/2).
	transportPlainH2
	// transportMeshUpgrade is HTTP/1.1 over a mutual-TLS opaque stream,
	// for Upgrade requests (WebSocket) to meshed endpoints, which HTTP/2
	// cannot carry without extended CONNECT.
	transportMeshUpgrade
)

type transportKey struct {
	c    *cluster
	kind transportKind
}

type hostKey struct{}

// newMeshTransport is a worker's pool of mutual-TLS connections to the
// meshed endpoints of c. The endpoint being dialled travels in the
// context of the request that starts the dial (Upgrade requests), or
// with it (h2.Transport.RoundTripVia).
func newMeshTransport(w *worker, c *cluster, kind transportKind) http.RoundTripper {
	dial := func(ctx context.Context, alpn string) (net.Conn, error) {
		h, _ := ctx.Value(hostKey{}).(*lb.Host)
		if h == nil {
			return nil, errors.New("dataplane: mesh dial without a host")
		}
		return w.dialHost(ctx, c, h, alpn)
	}
	if kind == transportMeshUpgrade {
		return &http.Transport{
			DialContext:           func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx, mtls.ALPNOpaqueTCP) },
			MaxIdleConnsPerHost:   1024,
			IdleConnTimeout:       idleTimeout(c),
			DisableCompression:    true,
			ExpectContinueTimeout: time.Second,
		}
	}
	return &h2.Transport{
		// The router names the endpoint (RoundTripVia).
		Dial: func(ctx context.Context, _ string, host any) (net.Conn, error) {
			h, _ := host.(*lb.Host)
			if h == nil {
				return nil, errors.New("dataplane: mesh dial without a host")
			}
			return w.dialHost(ctx, c, h, mtls.ALPNHTTP2)
		},
		IdleTimeout:    idleTimeout(c),
		MaxHeaderBytes: maxResponseHeaderBytes,
	}
}

// mtlsStats counts handshakes by direction and result ("ok" or a refusal
// reason), for meshlet_mtls_handshakes_total.
type mtlsStats struct{ m sync.Map } // [2]string -> *atomic.Uint64

func (s *mtlsStats) count(direction, result string) {
	k := [2]string{direction, result}
	v, ok := s.m.Load(k)
	if !ok {
		v, _ = s.m.LoadOrStore(k, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(1)
}

func (s *mtlsStats) each(f func(direction, result string, n uint64)) {
	s.m.Range(func(k, v any) bool {
		kk := k.([2]string)
		f(kk[0], kk[1], v.(*atomic.Uint64).Load())
		return true
	})
}
