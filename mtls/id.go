package mtls

import (
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Workload is a Kubernetes workload identity: a service account in a
// namespace of a trust domain. Its SPIFFE ID is
// spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>.
type Workload struct {
	// TrustDomain is the mesh's SPIFFE trust domain, e.g. cluster.local.
	TrustDomain spiffeid.TrustDomain
	// Namespace is the Kubernetes namespace of the service account.
	Namespace string
	// ServiceAccount is the name of the Kubernetes service account.
	ServiceAccount string
}

// ID returns the workload's SPIFFE ID, or an error naming the field that
// cannot appear in one.
func (w Workload) ID() (spiffeid.ID, error) {
	if w.TrustDomain.IsZero() {
		return spiffeid.ID{}, fmt.Errorf("mtls: workload ns=%q sa=%q: trust domain is empty", w.Namespace, w.ServiceAccount)
	}
	if err := spiffeid.ValidatePathSegment(w.Namespace); err != nil {
		return spiffeid.ID{}, fmt.Errorf("mtls: workload namespace %q: %w", w.Namespace, err)
	}
	if err := spiffeid.ValidatePathSegment(w.ServiceAccount); err != nil {
		return spiffeid.ID{}, fmt.Errorf("mtls: workload service account %q: %w", w.ServiceAccount, err)
	}
	return spiffeid.FromSegments(w.TrustDomain, "ns", w.Namespace, "sa", w.ServiceAccount)
}

// String returns the SPIFFE ID as text, or a description of the invalid
// workload when it has none.
func (w Workload) String() string {
	id, err := w.ID()
	if err != nil {
		return fmt.Sprintf("invalid workload (trust domain %q, ns %q, sa %q)", w.TrustDomain.Name(), w.Namespace, w.ServiceAccount)
	}
	return id.String()
}

// DefaultTrustDomain is the mesh's trust domain unless configured (Istio's).
const DefaultTrustDomain = "cluster.local"

// WorkloadID builds spiffe://<trustDomain>/ns/<namespace>/sa/<serviceAccount>.
// trustDomain may be given with or without the spiffe:// prefix.
func WorkloadID(trustDomain, namespace, serviceAccount string) (spiffeid.ID, error) {
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("mtls: trust domain %q: %w", trustDomain, err)
	}
	return Workload{TrustDomain: td, Namespace: namespace, ServiceAccount: serviceAccount}.ID()
}

// ParseWorkloadID parses a SPIFFE ID in the mesh's scheme
// (spiffe://<td>/ns/<ns>/sa/<sa>). The error names the input and what is
// wrong with it.
func ParseWorkloadID(s string) (Workload, error) {
	id, err := spiffeid.FromString(s)
	if err != nil {
		return Workload{}, fmt.Errorf("mtls: parse SPIFFE ID %q: %w", s, err)
	}
	return WorkloadFromID(id)
}

// WorkloadFromID splits a SPIFFE ID in the mesh's scheme into its parts, or
// says why the ID does not follow the scheme.
func WorkloadFromID(id spiffeid.ID) (Workload, error) {
	if id.IsZero() {
		return Workload{}, fmt.Errorf("mtls: SPIFFE ID is empty")
	}
	segs := strings.Split(strings.TrimPrefix(id.Path(), "/"), "/")
	if len(segs) != 4 || segs[0] != "ns" || segs[2] != "sa" {
		return Workload{}, fmt.Errorf("mtls: SPIFFE ID %q: path %q is not /ns/<namespace>/sa/<service-account>", id, id.Path())
	}
	// spiffeid already rejected empty and dot segments and bad characters.
	return Workload{TrustDomain: id.TrustDomain(), Namespace: segs[1], ServiceAccount: segs[3]}, nil
}
