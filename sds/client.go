package sds

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshlet-dev/meshlet/mtls"
)

// Client defaults (see ClientConfig).
const (
	DefaultCheckInterval   = 5 * time.Second  // wall-clock expiry check
	DefaultInitialBackoff  = time.Second      // first retry delay
	DefaultMaxBackoff      = 30 * time.Second // retry delay cap
	DefaultResponseTimeout = 30 * time.Second // wait for a certificate when due
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Target is the SDS server as a gRPC target: "host:port" (meshlet's
	// control plane on DefaultPort) or "unix:///path/to/socket" (a SPIRE
	// agent). Required.
	Target string
	// TLS secures the connection (set RootCAs to the mesh root and
	// ServerName to a name in the server's certificate). It may be nil only
	// for a unix target, where the socket's peer credentials do the job.
	TLS *tls.Config
	// Token returns the bearer token sent at the start of every stream (see
	// TokenFile). Nil sends none (a SPIRE agent attests the caller itself).
	Token func(context.Context) (string, error)
	// ID is this workload's SPIFFE ID. When set, every stream carries a CSR
	// for a freshly generated key and delivered certificates must carry
	// this ID. When zero, the server must deliver the private key with the
	// chain (a standard SDS server such as SPIRE) and its ID is accepted.
	ID spiffeid.ID
	// Store receives the certificate and trust bundles. Required.
	Store *mtls.Store
	// TrustDomain owns the roots of a plain trusted_ca ROOTCA; default ID's
	// trust domain, else the delivered certificate's.
	TrustDomain spiffeid.TrustDomain
	// CertificateName and BundleName are the resource names requested;
	// defaults CertificateResource and RootCAResource.
	CertificateName, BundleName string
	// Node is sent in the first request of each stream (cloned; the CSR is
	// added to its metadata). Default: id "sidecar~<ID>", user agent
	// "meshlet". Leaving user_agent_build_version unset makes a SPIRE agent
	// send a plain trusted_ca; both shapes are understood.
	Node *corev3.Node
	// CheckInterval is how often the certificate's renewal time is checked
	// against the wall clock; default DefaultCheckInterval. Timers run on the
	// monotonic clock, which stops while a machine is suspended; this check
	// is what renews a certificate that went stale during a suspension.
	CheckInterval time.Duration
	// InitialBackoff and MaxBackoff bound the jittered exponential back-off
	// between failed streams; defaults DefaultInitialBackoff and
	// DefaultMaxBackoff.
	InitialBackoff, MaxBackoff time.Duration
	// ResponseTimeout abandons a stream that has delivered no certificate
	// this long after it opened while renewal is due; default
	// DefaultResponseTimeout.
	ResponseTimeout time.Duration
	// Now is the wall clock; default time.Now.
	Now func() time.Time
	// Logger receives renewals, NACKs and reconnects; default slog.Default().
	Logger *slog.Logger
	// DialOptions are extra gRPC dial options.
	DialOptions []grpc.DialOption
}

// Client is the sidecar's SDS client; see the package comment. Run it once.
type Client struct {
	cfg     ClientConfig
	log     *slog.Logger
	renewAt atomic.Int64 // wall-clock Unix nanoseconds; 0 without a certificate
	nacks   atomic.Uint64
	streams atomic.Uint64

	testHookStream func() // called as each stream opens; tests only
}

// errRenew ends a stream because its certificate is due for renewal.
var errRenew = errors.New("sds: certificate due for renewal")

// NewClient checks cfg and applies its defaults.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Target == "" {
		return nil, errors.New("sds: client config: no Target")
	}
	if cfg.Store == nil {
		return nil, errors.New("sds: client config: no Store")
	}
	if cfg.TLS == nil && !strings.HasPrefix(cfg.Target, "unix:") {
		return nil, fmt.Errorf("sds: client config: target %q is not a unix socket and no TLS config is given", cfg.Target)
	}
	if cfg.CertificateName == "" {
		cfg.CertificateName = CertificateResource
	}
	if cfg.BundleName == "" {
		cfg.BundleName = RootCAResource
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff < cfg.InitialBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.InitialBackoff)
	}
	if cfg.ResponseTimeout <= 0 {
		cfg.ResponseTimeout = DefaultResponseTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TrustDomain.IsZero() && !cfg.ID.IsZero() {
		cfg.TrustDomain = cfg.ID.TrustDomain()
	}
	c := &Client{cfg: cfg, log: cfg.Logger}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.log = c.log.With("component", "sds-client", "target", cfg.Target)
	return c, nil
}

// SecondsUntilExpiry is the time left on the store's certificate, negative
// once it expired and 0 without one: the value of the expiry gauge.
func (c *Client) SecondsUntilExpiry() float64 {
	na := c.cfg.Store.Current().NotAfter()
	if na.IsZero() {
		return 0
	}
	return na.Sub(c.cfg.Now()).Seconds()
}

// RenewalTime is when the current certificate is due for renewal (zero
// without one).
func (c *Client) RenewalTime() time.Time {
	n := c.renewAt.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// NACKs counts the responses this client rejected.
func (c *Client) NACKs() uint64 { return c.nacks.Load() }

// Streams counts the streams this client opened.
func (c *Client) Streams() uint64 { return c.streams.Load() }

// Run keeps the store supplied until ctx ends, and then returns ctx.Err().
// Failures are logged and retried with back-off; the store keeps the last
// good certificate throughout.
func (c *Client) Run(ctx context.Context) error {
	creds := insecure.NewCredentials()
	if c.cfg.TLS != nil {
		creds = credentials.NewTLS(c.cfg.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if !strings.HasPrefix(c.cfg.Target, "unix:") {
		// A control plane that vanished without a reset (node lost) is
		// noticed in about a minute, not after TCP's retransmission timeout.
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Minute, Timeout: 20 * time.Second}))
	}
	conn, err := grpc.NewClient(c.cfg.Target, append(opts, c.cfg.DialOptions...)...)
	if err != nil {
		return fmt.Errorf("sds: dial %s: %w", c.cfg.Target, err)
	}
	defer conn.Close()
	api := secretv3.NewSecretDiscoveryServiceClient(conn)

	if snap := c.cfg.Store.Current(); snap.Certificate != nil {
		c.scheduleRenewal(snap.Certificate.Leaf, !c.cfg.ID.IsZero(), c.cfg.Now())
	}
	backoff := c.cfg.InitialBackoff
	for {
		res, err := c.stream(ctx, api)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case errors.Is(err, errRenew) && res.newCert:
			backoff = c.cfg.InitialBackoff
			c.log.Debug("renewing certificate on a new stream")
			continue
		case errors.Is(err, errRenew):
			// Due, but the server re-sent the same certificate (a server
			// that rotates on its own schedule): ask again, backing off.
			c.log.Warn("certificate due for renewal but the server sent no new one; retrying", "renew_at", c.RenewalTime(), "expires_in_s", int(c.SecondsUntilExpiry()))
		default:
			if res.delivered {
				backoff = c.cfg.InitialBackoff
			}
			c.log.Warn("SDS stream ended; keeping the current certificate and reconnecting", "error", err, "backoff", backoff, "expires_in_s", int(c.SecondsUntilExpiry()))
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, c.cfg.MaxBackoff)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// streamResult says what one stream achieved.
type streamResult struct {
	delivered bool // at least one response was accepted
	gotCert   bool // a certificate was accepted (new or not)
	newCert   bool // a different certificate was installed
}

type recvResult struct {
	resp *discoveryv3.DiscoveryResponse
	err  error
}

// stream runs one StreamSecrets call: CSR and token in the first request,
// ACK or NACK for every response, until an error, ctx's end or errRenew.
func (c *Client) stream(ctx context.Context, api secretv3.SecretDiscoveryServiceClient) (streamResult, error) {
	var res streamResult
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()

	node := c.node()
	var key crypto.Signer
	if !c.cfg.ID.IsZero() {
		k, err := mtls.NewKey()
		if err != nil {
			return res, err
		}
		csr, err := mtls.NewCSR(k, c.cfg.ID)
		if err != nil {
			return res, err
		}
		key = k
		node.Metadata.Fields[CSRMetadataKey] = structpb.NewStringValue(string(csr))
	}
	if c.cfg.Token != nil {
		tok, err := c.cfg.Token(ctx)
		if err != nil {
			return res, err
		}
		sctx = metadata.AppendToOutgoingContext(sctx, "authorization", "Bearer "+tok)
	}
	c.streams.Add(1)
	if c.testHookStream != nil {
		c.testHookStream()
	}
	st, err := api.StreamSecrets(sctx)
	if err != nil {
		return res, fmt.Errorf("sds: open stream to %s: %w", c.cfg.Target, err)
	}
	names := []string{c.cfg.CertificateName, c.cfg.BundleName}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, ResourceNames: names, TypeUrl: SecretTypeURL}); err != nil {
		if errors.Is(err, io.EOF) { // the server ended the stream; Recv has its status
			_, err = st.Recv()
		}
		return res, fmt.Errorf("sds: send request to %s: %w", c.cfg.Target, err)
	}
	recv := make(chan recvResult, 1)
	go func() {
		for {
			resp, err := st.Recv()
			select {
			case recv <- recvResult{resp, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	started := c.cfg.Now()
	check := time.NewTicker(c.cfg.CheckInterval)
	defer check.Stop()
	renew := time.NewTimer(c.untilRenewal())
	defer renew.Stop()
	acked := ""
	for {
		select {
		case r := <-recv:
			if r.err != nil {
				return res, fmt.Errorf("sds: stream from %s: %w", c.cfg.Target, r.err)
			}
			gotCert, newCert, err := c.apply(r.resp, key)
			req := &discoveryv3.DiscoveryRequest{ResponseNonce: r.resp.GetNonce(), ResourceNames: names, TypeUrl: SecretTypeURL}
			if err != nil {
				c.nacks.Add(1)
				c.log.Warn("NACK: rejected SDS response; keeping the last good secrets", "version", r.resp.GetVersionInfo(), "error", err)
				req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			} else {
				acked = r.resp.GetVersionInfo()
				res.delivered = true
				res.gotCert = res.gotCert || gotCert
				if newCert {
					res.newCert = true
					renew.Reset(c.untilRenewal())
				}
			}
			req.VersionInfo = acked
			if err := st.Send(req); err != nil {
				if errors.Is(err, io.EOF) { // the server ended the stream; Recv has its status
					select {
					case r := <-recv:
						if r.err != nil {
							err = r.err
						}
					case <-ctx.Done():
					}
				}
				return res, fmt.Errorf("sds: send ACK to %s: %w", c.cfg.Target, err)
			}
		case <-check.C:
		case <-renew.C:
			renew.Reset(max(c.untilRenewal(), c.cfg.CheckInterval))
		case <-ctx.Done():
			return res, ctx.Err()
		}
		if c.due() {
			if res.gotCert {
				return res, errRenew
			}
			if waited := c.cfg.Now().Sub(started); waited > c.cfg.ResponseTimeout {
				return res, fmt.Errorf("sds: no certificate from %s %s after opening the stream, and renewal is due", c.cfg.Target, waited.Round(time.Second))
			}
		}
	}
}

// due reports whether the wall clock has reached the renewal time. renewAt
// carries no monotonic reading, so the comparison is on wall time.
func (c *Client) due() bool {
	at := c.renewAt.Load()
	return at != 0 && c.cfg.Now().UnixNano() >= at
}

func (c *Client) untilRenewal() time.Duration {
	at := c.renewAt.Load()
	if at == 0 {
		return c.cfg.CheckInterval
	}
	return max(time.Duration(at-c.cfg.Now().UnixNano()), time.Millisecond)
}

// scheduleRenewal sets the renewal time of a certificate received at
// received: about half of its remaining life (45-55 %, spreading sidecars
// started together) when this client owns the key, or 80 % when the server
// delivered it and rotates it on its own schedule (SPIRE rotates at
// half-life), so that this is only a fallback. For a fresh certificate the
// remaining life is its lifetime; counting from receipt keeps a backdated
// NotBefore or a late delivery from making a new certificate due at once.
func (c *Client) scheduleRenewal(leaf *x509.Certificate, ownKey bool, received time.Time) {
	if received.Before(leaf.NotBefore) {
		received = leaf.NotBefore
	}
	frac := 0.8
	if ownKey {
		frac = 0.45 + 0.1*rand.Float64()
	}
	at := received.Add(time.Duration(float64(leaf.NotAfter.Sub(received)) * frac))
	c.renewAt.Store(at.UnixNano())
}

func (c *Client) node() *corev3.Node {
	var n *corev3.Node
	if c.cfg.Node != nil {
		n = proto.Clone(c.cfg.Node).(*corev3.Node)
	} else {
		n = &corev3.Node{Id: "sidecar~" + c.cfg.ID.String(), UserAgentName: "meshlet"}
	}
	if n.Metadata == nil {
		n.Metadata = &structpb.Struct{}
	}
	if n.Metadata.Fields == nil {
		n.Metadata.Fields = map[string]*structpb.Value{}
	}
	return n
}

type tlsCertificate struct {
	chain []*x509.Certificate
	key   crypto.Signer
}

// apply validates a response as a whole and installs it into the store; an
// error (a NACK) changes nothing. sessionKey is the key of this stream's
// CSR, used when the server sends a chain without a key.
func (c *Client) apply(resp *discoveryv3.DiscoveryResponse, sessionKey crypto.Signer) (gotCert, newCert bool, err error) {
	if resp.GetTypeUrl() != SecretTypeURL {
		return false, false, fmt.Errorf("sds: response type_url %q, want %q", resp.GetTypeUrl(), SecretTypeURL)
	}
	var (
		cert   *tlsCertificate
		rootCA *tlsv3.Secret
	)
	for i, r := range resp.GetResources() {
		sec := &tlsv3.Secret{}
		if err := r.UnmarshalTo(sec); err != nil {
			return false, false, fmt.Errorf("sds: resource %d (type %q) is not a Secret: %w", i, r.GetTypeUrl(), err)
		}
		switch sec.GetName() {
		case c.cfg.CertificateName:
			if cert, err = parseTLSCertificate(sec); err != nil {
				return false, false, fmt.Errorf("sds: %w", err)
			}
		case c.cfg.BundleName:
			rootCA = sec
		default:
			c.log.Debug("ignoring unrequested SDS secret", "name", sec.GetName())
		}
	}
	if cert == nil && rootCA == nil {
		return false, false, fmt.Errorf("sds: response version %q has neither %q nor %q", resp.GetVersionInfo(), c.cfg.CertificateName, c.cfg.BundleName)
	}

	now := c.cfg.Now()
	prev := c.cfg.Store.Current()
	td := c.cfg.TrustDomain
	ownKey := false
	if cert != nil {
		leaf := cert.chain[0]
		id, err := x509svid.IDFromCert(leaf)
		if err != nil {
			return false, false, fmt.Errorf("sds: certificate %q: %w", c.cfg.CertificateName, err)
		}
		if !c.cfg.ID.IsZero() && id != c.cfg.ID {
			return false, false, fmt.Errorf("sds: certificate is for %s, this workload is %s", id, c.cfg.ID)
		}
		if cert.key == nil {
			if sessionKey == nil {
				return false, false, fmt.Errorf("sds: certificate %s came without a private key and this client sent no CSR (set ClientConfig.ID)", id)
			}
			cert.key, ownKey = sessionKey, true
		}
		if !keyMatches(leaf, cert.key) {
			return false, false, fmt.Errorf("sds: certificate %s does not match the private key (ours from the CSR: %t)", id, ownKey)
		}
		if now.After(leaf.NotAfter) {
			return false, false, fmt.Errorf("sds: certificate %s expired at %s", id, leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if td.IsZero() {
			td = id.TrustDomain()
		}
	}
	if td.IsZero() {
		td = prev.ID.TrustDomain()
	}
	var bundles []*x509bundle.Bundle
	if rootCA != nil {
		if bundles, err = parseValidationContext(rootCA, td); err != nil {
			return false, false, fmt.Errorf("sds: %w", err)
		}
	}
	if cert != nil {
		// Our own chain must verify against the bundle peers will use.
		var src x509bundle.Source = prev
		if bundles != nil {
			src = x509bundle.NewSet(bundles...)
		}
		if bundles != nil || len(prev.TrustDomains()) > 0 {
			if _, _, err := x509svid.Verify(cert.chain, src, x509svid.WithTime(now)); err != nil {
				return false, false, fmt.Errorf("sds: certificate does not verify against the trust bundle: %w", err)
			}
		}
	}
	upd := mtls.Update{Bundles: bundles}
	if cert != nil {
		upd.Chain, upd.Key = cert.chain, cert.key
		newCert = prev.Certificate == nil || !bytes.Equal(prev.Certificate.Leaf.Raw, cert.chain[0].Raw)
	}
	// The renewal time is set before the certificate is published, so that
	// whoever sees the certificate also sees when it renews.
	oldRenewAt := c.renewAt.Load()
	if newCert {
		c.scheduleRenewal(cert.chain[0], ownKey, now)
	}
	snap, changed, err := c.cfg.Store.Update(upd)
	if err != nil {
		c.renewAt.Store(oldRenewAt)
		return false, false, fmt.Errorf("sds: %w", err)
	}
	if newCert {
		c.log.Info("installed workload certificate", "spiffe_id", snap.ID.String(), "not_after", snap.NotAfter(), "renew_at", c.RenewalTime(), "version", resp.GetVersionInfo())
	} else if changed {
		c.log.Info("installed trust bundles", "trust_domains", snap.TrustDomains(), "version", resp.GetVersionInfo())
	}
	return cert != nil, newCert, nil
}

func keyMatches(leaf *x509.Certificate, key crypto.Signer) bool {
	pk, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return ok && pk.Equal(key.Public())
}
