// Package mtls is meshlet's workload identity: SPIFFE IDs of the form
// spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>, the mesh CA
// that signs workload CSRs, a certificate Store that SDS fills and TLS
// handshakes read, TLS configurations for sidecar-to-sidecar mutual TLS, and
// per-port authorization of verified peers (STRICT or PERMISSIVE).
//
// Certificates and trust bundles are read at handshake time from a Store, so a
// rotation takes effect on the next handshake and never touches established
// connections. SPIFFE ID parsing and X509-SVID verification come from
// go-spiffe (spiffeid, x509svid, x509bundle); this package adds the mesh's
// naming scheme, error messages that say why a peer was refused, and the CA.
//
// The package does no I/O of its own except through a CAStore (FileCAStore
// here; a Kubernetes Secret in package kubeca, kept apart so the sidecar does
// not link client-go) and the connections a caller hands to crypto/tls.
package mtls
