// Package meshmeta holds the names meshlet's control plane (package
// discovery/xds, in cmd/injector) and its sidecar (packages discovery and
// discovery/adsclient, in cmd/sidecar) agree on beyond Envoy's own API: the
// keys of meshlet's metadata on clusters and endpoints, and the local
// cluster's name. It is constants only, so that the control plane need not
// link the sidecar's translation to name them.
package meshmeta

// Metadata keys and the local cluster's name.
const (
	// MetadataNamespace is meshlet's filter_metadata key, on clusters (the
	// Kubernetes service a cluster is for: ServiceField, PortField,
	// AddressesField) and on endpoints (MeshedField, IdentityField).
	MetadataNamespace = "meshlet.io"
	// RouteMetadataKey is the typed_filter_metadata key of a cluster's
	// envoy.config.route.v3.RouteAction, which carries the timeout and
	// retry_policy of the routes to it (meshlet serves no RDS).
	RouteMetadataKey = "meshlet.io/route"

	// ServiceField is the string in a cluster's
	// filter_metadata["meshlet.io"] naming the service host the cluster is
	// for.
	ServiceField = "service"
	// PortField is the number in a cluster's filter_metadata["meshlet.io"]
	// holding the service port.
	PortField = "port"
	// AddressesField is the list in a cluster's
	// filter_metadata["meshlet.io"] holding the service's cluster IPs, the
	// original destinations the sidecar routes to the cluster.
	AddressesField = "addresses"

	// RouteConfigField is the string in a cluster's
	// filter_metadata["meshlet.io"] naming the RouteConfiguration (RDS,
	// over the same ADS stream) that routes requests to the cluster's
	// Service port: set when Gateway API routes attach to it. The sidecar
	// subscribes to exactly the names its clusters carry, as Envoy
	// subscribes to the route_config_name of its listeners.
	RouteConfigField = "route_config"

	// MeshedField is the bool in an LbEndpoint's
	// filter_metadata["meshlet.io"] saying that the endpoint's pod runs a
	// meshlet sidecar, so it is reached with mTLS.
	MeshedField = "meshed"
	// IdentityField is the string in an LbEndpoint's
	// filter_metadata["meshlet.io"] naming the SPIFFE ID the meshed
	// endpoint must present (its pod's service account).
	IdentityField = "identity"

	// LocalClusterName is the cluster the control plane sends every
	// sidecar with the endpoints of the sidecar's own service (Envoy's
	// cluster_manager.local_cluster_name), for zone-aware routing.
	LocalClusterName = "meshlet|local"
)

// The inbound extension configurations (ECDS, type
// envoy.config.core.v3.TypedExtensionConfig) every sidecar subscribes to
// by name over the same ADS stream: its workload's security policies.
// The control plane always sends all of them; the sidecar reports ready
// only once it holds them, so no request slips in before its policies.
const (
	// PeerAuthenticationName's typed_config is an
	// istio.security.v1beta1.PeerAuthentication holding the workload's
	// effective modes, inheritance already resolved: mtls.mode STRICT,
	// PERMISSIVE or DISABLE, and port_level_mtls by container port.
	PeerAuthenticationName = "meshlet.inbound.peer_authentication"
	// HTTPRBACAuditName, HTTPRBACDenyName and HTTPRBACAllowName are the
	// inbound HTTP RBAC filters
	// (envoy.extensions.filters.http.rbac.v3.RBAC), run in that order on
	// each request: Istio's AUDIT, DENY and ALLOW policies.
	HTTPRBACAuditName = "meshlet.inbound.http.rbac.audit"
	HTTPRBACDenyName  = "meshlet.inbound.http.rbac.deny"
	HTTPRBACAllowName = "meshlet.inbound.http.rbac.allow"
	// NetworkRBACAuditName, NetworkRBACDenyName and NetworkRBACAllowName
	// are the inbound network RBAC filters
	// (envoy.extensions.filters.network.rbac.v3.RBAC), run in that order
	// on each connection proxied as opaque TCP.
	NetworkRBACAuditName = "meshlet.inbound.tcp.rbac.audit"
	NetworkRBACDenyName  = "meshlet.inbound.tcp.rbac.deny"
	NetworkRBACAllowName = "meshlet.inbound.tcp.rbac.allow"
)

// InboundExtensionNames are the names above, sorted.
var InboundExtensionNames = []string{HTTPRBACAllowName, HTTPRBACAuditName, HTTPRBACDenyName, PeerAuthenticationName,
	NetworkRBACAllowName, NetworkRBACAuditName, NetworkRBACDenyName}
