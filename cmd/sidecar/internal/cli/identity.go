package cli

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/mtls"
	"github.com/meshlet-dev/meshlet/sds"
)

// sdsDial says where the workload certificate comes from: target is
// "host:port" (the control plane, TLS verified against caFile, with the
// token in tokenFile) or "unix:///path" (a SPIRE agent, which attests the
// caller itself); id is the SPIFFE ID the sidecar requests by CSR (zero:
// the server delivers key and chain, as SPIRE does).
type sdsDial struct {
	target, caFile, tokenFile string
	id                        spiffeid.ID
}

// newSDS makes the SDS client feeding a new certificate store; the caller
// starts its Run (after the privilege drop: the server attests the uid of
// the process that dials it).
func newSDS(d sdsDial, log *slog.Logger) (*mtls.Store, *sds.Client, error) {
	store := mtls.NewStore()
	cfg := sds.ClientConfig{Target: d.target, Store: store, ID: d.id, Logger: log}
	if !strings.HasPrefix(d.target, "unix:") {
		if d.caFile == "" {
			return nil, nil, fmt.Errorf("run: -sds %q: a TCP target needs -sds-ca (or -xds-ca)", d.target)
		}
		var err error
		if cfg.TLS, err = controlPlaneTLS("sds", d.target, d.caFile); err != nil {
			return nil, nil, err
		}
		if d.tokenFile != "" {
			cfg.Token = sds.TokenFile(d.tokenFile)
		}
		if d.id.IsZero() {
			return nil, nil, fmt.Errorf("run: -sds %q: the control plane signs CSRs: -identity is required", d.target)
		}
	}
	client, err := sds.NewClient(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("run: %w", err)
	}
	return store, client, nil
}

// podIdentity is the SPIFFE ID of the pod's service account:
// spiffe://$MESHLET_TRUST_DOMAIN (default cluster.local)/ns/$POD_NAMESPACE/sa/$SERVICE_ACCOUNT.
func podIdentity(getenv func(string) string) (spiffeid.ID, error) {
	td := getenv("MESHLET_TRUST_DOMAIN")
	if td == "" {
		td = mtls.DefaultTrustDomain
	}
	ns, sa := getenv("POD_NAMESPACE"), getenv("SERVICE_ACCOUNT")
	if ns == "" || sa == "" {
		return spiffeid.ID{}, fmt.Errorf("run -pod: POD_NAMESPACE (%q) and SERVICE_ACCOUNT (%q) name the workload identity; both are required with -sds", ns, sa)
	}
	id, err := mtls.WorkloadID(td, ns, sa)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("run -pod: workload identity (MESHLET_TRUST_DOMAIN, POD_NAMESPACE, SERVICE_ACCOUNT): %w", err)
	}
	return id, nil
}

// readiness reports ready once every part that gates it is done (the
// first xDS configuration, the first workload certificate).
type readiness struct {
	mu   sync.Mutex
	left int
	set  func(bool)
}

func (r *readiness) done() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.left--; r.left == 0 {
		r.set(true)
	}
}
