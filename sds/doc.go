// Package sds delivers workload certificates over Envoy's Secret Discovery
// Service (envoy.service.secret.v3, state of the world).
//
// The Server runs in the control plane (cmd/injector, port 15012 over TLS).
// A caller authenticates with its projected ServiceAccount token (gRPC
// metadata "authorization: Bearer <token>", audience "meshlet"), checked by an
// Authenticator (a Kubernetes TokenReview, package kubeauth, kept apart so the
// sidecar does not link client-go); its identity comes
// from the token alone. The caller's CSR travels in the first
// DiscoveryRequest of a stream, as the string field "CSR" of node.metadata
// (PEM). The server signs it with the mesh CA only if the CSR's one SAN is the
// token's SPIFFE ID and answers with two resources: "default", a
// TlsCertificate with the signed chain and no private key (the key never
// leaves the pod), and "ROOTCA", the trust bundle as a
// CertificateValidationContext. Bundle changes are pushed on every open
// stream. One stream signs one CSR: a sidecar renews by opening a new stream
// with a new key and a fresh token, so every signing is authenticated anew.
//
// The Client runs in the sidecar. It generates its key, sends the CSR and the
// token, ACKs or NACKs each response (a NACK keeps the last good certificate),
// reconnects with jittered exponential back-off, renews at about half the
// certificate's lifetime, checks expiry against the wall clock every few
// seconds (a suspended VM wakes up with a due certificate and renews at once)
// and keeps serving the current certificate while the server is unreachable.
// It also works against any standard SDS server that delivers the key with the
// chain, such as the SPIRE agent over its Unix socket, and accepts a ROOTCA
// either as a plain trusted_ca or in Envoy's SPIFFE-validator shape
// (custom_validator_config "envoy.tls.cert_validator.spiffe" with one bundle
// per trust domain). It writes into an mtls.Store that TLS handshakes read.
package sds
