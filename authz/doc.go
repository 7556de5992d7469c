// Package authz evaluates Envoy's role-based access control model
// (envoy.config.rbac.v3) for the inbound sidecar: Compile and
// CompileNetwork check an HTTP or network RBAC filter's configuration
// (envoy.extensions.filters.{http,network}.rbac.v3.RBAC) and turn it into
// a Filter, and a Chain of filters decides each request or connection in
// order, as Envoy's filter chain does.
//
// A filter's policies are tried in name order (Envoy keeps them in a
// sorted map) and the first whose permissions and principals both match
// decides: an ALLOW filter allows what a policy matches and denies the
// rest, a DENY filter denies what one matches, a LOG filter only marks
// the request. A filter without rules allows everything, one with empty
// rules (no policies) applies its action's default: an ALLOW filter then
// denies everything, which is how "allow nothing" is written.
//
// Only what can be checked is accepted: a field meshlet does not evaluate
// (metadata, filter state, CEL conditions, matcher trees, shadow rules)
// makes Compile fail naming it, so a control plane's NACK keeps the last
// good policy rather than a policy silently weaker than the one sent.
// The package is pure: it reads what the caller gives in an Input and
// does no I/O.
package authz
