package sds

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshlet-dev/meshlet/mtls"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// CA signs workload CSRs; its bundle is the initial ROOTCA. Required.
	CA *mtls.CA
	// Authenticator checks callers' bearer tokens. Required.
	Authenticator Authenticator
	// CertTTL is the lifetime of issued workload certificates; default
	// mtls.DefaultWorkloadTTL (24 h).
	CertTTL time.Duration
	// ServingHosts are the DNS names (or IPs) in the server's own TLS
	// certificate, e.g. meshlet-injector.meshlet-system.svc. Required for
	// TLSConfig and Serve.
	ServingHosts []string
	// Logger receives stream events; default slog.Default().
	Logger *slog.Logger
}

// Server is the control plane's SDS server. It implements
// secretv3.SecretDiscoveryServiceServer: StreamSecrets and FetchSecrets;
// DeltaSecrets is Unimplemented, as in istio-agent and the SPIRE agent.
type Server struct {
	secretv3.UnimplementedSecretDiscoveryServiceServer

	cfg     ServerConfig
	log     *slog.Logger
	bundles atomic.Pointer[bundleGeneration]

	bundlesMu sync.Mutex // serializes SetBundles
	servingMu sync.Mutex // serializes re-issuing the serving certificate
	serving   atomic.Pointer[tls.Certificate]

	grpcMu sync.Mutex
	grpcs  []*grpc.Server
}

// bundleGeneration is one version of the trust bundles; changed is closed
// when a newer one replaces it, waking every stream.
type bundleGeneration struct {
	bundles []*x509bundle.Bundle
	version uint64
	changed chan struct{}
}

// servingCertTTL is the lifetime of the server's own TLS certificate; it is
// re-issued at half-life by GetCertificate.
const servingCertTTL = 24 * time.Hour

// NewServer checks cfg and returns a server whose ROOTCA is cfg.CA's bundle.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.CA == nil {
		return nil, errors.New("sds: server config: no CA")
	}
	if cfg.Authenticator == nil {
		return nil, errors.New("sds: server config: no Authenticator")
	}
	if cfg.CertTTL <= 0 {
		cfg.CertTTL = mtls.DefaultWorkloadTTL
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("component", "sds-server")
	s.bundles.Store(&bundleGeneration{bundles: []*x509bundle.Bundle{cfg.CA.Bundle()}, version: 1, changed: make(chan struct{})})
	return s, nil
}

// SetBundles replaces the trust bundles served as ROOTCA (e.g. the mesh root
// plus a new root during CA rotation, or federated trust domains) and pushes
// them on every open stream.
func (s *Server) SetBundles(bundles ...*x509bundle.Bundle) error {
	if len(bundles) == 0 {
		return errors.New("sds: SetBundles: no bundles")
	}
	seen := map[spiffeid.TrustDomain]bool{}
	cp := make([]*x509bundle.Bundle, 0, len(bundles))
	for _, b := range bundles {
		if b == nil || b.Empty() {
			return errors.New("sds: SetBundles: a bundle has no X.509 authorities")
		}
		if seen[b.TrustDomain()] {
			return fmt.Errorf("sds: SetBundles: two bundles for trust domain %q", b.TrustDomain().Name())
		}
		seen[b.TrustDomain()] = true
		cp = append(cp, b.Clone())
	}
	slices.SortFunc(cp, func(a, b *x509bundle.Bundle) int { return a.TrustDomain().Compare(b.TrustDomain()) })
	s.bundlesMu.Lock()
	defer s.bundlesMu.Unlock()
	old := s.bundles.Load()
	s.bundles.Store(&bundleGeneration{bundles: cp, version: old.version + 1, changed: make(chan struct{})})
	close(old.changed)
	return nil
}

// Register adds the SDS service to g, so one gRPC server on 15012 can host
// SDS next to xDS.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	secretv3.RegisterSecretDiscoveryServiceServer(g, s)
}

// TLSConfig returns the server-side TLS configuration: a certificate for
// cfg.ServingHosts issued by the CA and re-issued at half its life. Callers
// authenticate with tokens, not client certificates.
func (s *Server) TLSConfig() (*tls.Config, error) {
	if len(s.cfg.ServingHosts) == 0 {
		return nil, errors.New("sds: server config: no ServingHosts for the TLS certificate")
	}
	if _, err := s.servingCertificate(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.servingCertificate() },
	}, nil
}

func (s *Server) servingCertificate() (*tls.Certificate, error) {
	if c := s.serving.Load(); c != nil && time.Until(halfLife(c.Leaf)) > 0 {
		return c, nil
	}
	s.servingMu.Lock()
	defer s.servingMu.Unlock()
	if c := s.serving.Load(); c != nil && time.Until(halfLife(c.Leaf)) > 0 {
		return c, nil
	}
	c, err := s.cfg.CA.IssueServingCertificate(s.cfg.ServingHosts, servingCertTTL)
	if err != nil {
		return nil, fmt.Errorf("sds: serving certificate for %q: %w", s.cfg.ServingHosts, err)
	}
	s.serving.Store(c)
	return c, nil
}

func halfLife(c *x509.Certificate) time.Time { return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) / 2) }

// Serve serves SDS over TLS (TLSConfig) on lis until Stop. Extra gRPC server
// options may be given (interceptors, limits). A gRPC server hosting SDS
// next to other services (Register) should allow client keepalive pings
// every 30 s, as Serve does.
func (s *Server) Serve(lis net.Listener, opts ...grpc.ServerOption) error {
	tc, err := s.TLSConfig()
	if err != nil {
		return err
	}
	g := grpc.NewServer(append([]grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(tc)),
		// Clients ping every minute on open streams (see Client.Run).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 30 * time.Second}),
	}, opts...)...)
	s.Register(g)
	s.grpcMu.Lock()
	s.grpcs = append(s.grpcs, g)
	s.grpcMu.Unlock()
	if err := g.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("sds: serve on %s: %w", lis.Addr(), err)
	}
	return nil
}

// Stop closes the listeners and streams of every Serve call.
func (s *Server) Stop() {
	s.grpcMu.Lock()
	gs := s.grpcs
	s.grpcs = nil
	s.grpcMu.Unlock()
	for _, g := range gs {
		g.Stop()
	}
}

// BearerToken returns the token of an incoming gRPC call's single
// "authorization: Bearer <token>" metadata entry, the way SDS and xDS
// clients present their ServiceAccount token.
func BearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return "", errors.New(`want one "authorization: Bearer <token>" metadata entry`)
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", errors.New(`authorization metadata is not "Bearer <token>"`)
	}
	return strings.TrimSpace(token), nil
}

// authenticate reads the bearer token from the call's metadata and returns
// the caller's SPIFFE ID in the CA's trust domain.
func (s *Server) authenticate(ctx context.Context) (spiffeid.ID, Caller, error) {
	token, err := BearerToken(ctx)
	if err != nil {
		return spiffeid.ID{}, Caller{}, status.Error(codes.Unauthenticated, "sds: "+err.Error())
	}
	caller, err := s.cfg.Authenticator.Authenticate(ctx, token)
	if err != nil {
		return spiffeid.ID{}, Caller{}, status.Error(codes.Unauthenticated, err.Error())
	}
	id, err := mtls.Workload{TrustDomain: s.cfg.CA.TrustDomain(), Namespace: caller.Namespace, ServiceAccount: caller.ServiceAccount}.ID()
	if err != nil {
		return spiffeid.ID{}, Caller{}, status.Error(codes.PermissionDenied, err.Error())
	}
	return id, caller, nil
}

// requestedNames validates a request's resource names; none means both.
func requestedNames(names []string) ([]string, error) {
	if len(names) == 0 {
		return []string{CertificateResource, RootCAResource}, nil
	}
	out := make([]string, 0, 2)
	for _, n := range names {
		if n != CertificateResource && n != RootCAResource {
			return nil, status.Errorf(codes.InvalidArgument, "sds: unknown resource %q (this server serves %q and %q)", n, CertificateResource, RootCAResource)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// sign reads the CSR from the request's node metadata and signs it for id.
func (s *Server) sign(req *discoveryv3.DiscoveryRequest, id spiffeid.ID) ([]byte, error) {
	field := req.GetNode().GetMetadata().GetFields()[CSRMetadataKey]
	csrPEM := field.GetStringValue()
	if csrPEM == "" {
		return nil, status.Errorf(codes.InvalidArgument, "sds: %q requested without a CSR in node.metadata[%q]", CertificateResource, CSRMetadataKey)
	}
	csr, err := mtls.ParseCSR([]byte(csrPEM))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "sds: CSR of %s: %v", id, err)
	}
	chain, err := s.cfg.CA.SignCSR(csr, id, s.cfg.CertTTL)
	if err != nil {
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	return mtls.EncodeCertificatesPEM(chain), nil
}

func (s *Server) build(names []string, chainPEM []byte, gen *bundleGeneration) ([]*anypb.Any, error) {
	var res []*anypb.Any
	for _, n := range names {
		var (
			a   *anypb.Any
			err error
		)
		switch n {
		case CertificateResource:
			a, err = certificateSecret(chainPEM)
		case RootCAResource:
			a, err = rootCASecret(gen.bundles)
		}
		if err != nil {
			return nil, status.Errorf(codes.Internal, "sds: encode %q: %v", n, err)
		}
		res = append(res, a)
	}
	return res, nil
}

// StreamSecrets implements the state-of-the-world SDS stream. The first
// request fixes the caller's CSR; every response carries all requested
// resources with a new version and nonce. A request echoing the last nonce is
// an ACK, or a NACK when it has error_detail (logged; the client keeps its
// last good secrets and nothing is resent). Requests with a stale nonce are
// ignored. A bundle change is pushed at once.
func (s *Server) StreamSecrets(stream secretv3.SecretDiscoveryService_StreamSecretsServer) error {
	ctx := stream.Context()
	id, caller, err := s.authenticate(ctx)
	if err != nil {
		s.log.Warn("SDS stream refused", "error", err)
		return err
	}
	log := s.log.With("spiffe_id", id.String(), "pod", caller.PodName)

	reqs := make(chan *discoveryv3.DiscoveryRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()

	var (
		names    []string
		chainPEM []byte
		nonce    string
		version  uint64
		gen      = s.bundles.Load()
	)
	for {
		select {
		case req := <-reqs:
			if req.GetTypeUrl() != "" && req.GetTypeUrl() != SecretTypeURL {
				return status.Errorf(codes.InvalidArgument, "sds: type_url %q, want %q", req.GetTypeUrl(), SecretTypeURL)
			}
			if nonce != "" {
				if req.GetResponseNonce() != nonce {
					log.Debug("SDS request with a stale nonce ignored", "nonce", req.GetResponseNonce(), "want", nonce)
					continue
				}
				if d := req.GetErrorDetail(); d != nil {
					log.Warn("SDS client rejected a response (NACK); it keeps its last good secrets", "version", version, "error", d.GetMessage())
				} else {
					log.Debug("SDS response acknowledged", "version", req.GetVersionInfo())
				}
			}
			newNames, err := requestedNames(req.GetResourceNames())
			if err != nil {
				return err
			}
			if names != nil && slices.Equal(names, newNames) {
				continue // an ACK or NACK, no new subscription
			}
			names = newNames
			if slices.Contains(names, CertificateResource) && chainPEM == nil {
				if chainPEM, err = s.sign(req, id); err != nil {
					log.Warn("SDS certificate request refused", "error", err)
					return err
				}
				log.Info("SDS signed a workload certificate", "ttl", s.cfg.CertTTL)
			}
		case <-gen.changed:
			gen = s.bundles.Load()
			if !slices.Contains(names, RootCAResource) {
				continue
			}
			log.Info("SDS pushing a trust bundle change", "bundle_version", gen.version)
		case err := <-recvErr:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-ctx.Done():
			return nil
		}
		res, err := s.build(names, chainPEM, gen)
		if err != nil {
			return err
		}
		version++
		nonce = newNonce()
		if err := stream.Send(&discoveryv3.DiscoveryResponse{
			VersionInfo: strconv.FormatUint(version, 10),
			Resources:   res,
			TypeUrl:     SecretTypeURL,
			Nonce:       nonce,
		}); err != nil {
			return err
		}
	}
}

// FetchSecrets answers one request: the caller's CSR (node.metadata "CSR")
// is signed if "default" is requested, and ROOTCA is the current bundle.
func (s *Server) FetchSecrets(ctx context.Context, req *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryResponse, error) {
	id, _, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	names, err := requestedNames(req.GetResourceNames())
	if err != nil {
		return nil, err
	}
	var chainPEM []byte
	if slices.Contains(names, CertificateResource) {
		if chainPEM, err = s.sign(req, id); err != nil {
			return nil, err
		}
	}
	gen := s.bundles.Load()
	res, err := s.build(names, chainPEM, gen)
	if err != nil {
		return nil, err
	}
	return &discoveryv3.DiscoveryResponse{VersionInfo: "fetch-" + strconv.FormatUint(gen.version, 10), Resources: res, TypeUrl: SecretTypeURL}, nil
}

func newNonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
