// Package xds is the control-plane side of discovery: it translates
// Kubernetes Services, their EndpointSlices and the zone-labelled Nodes
// into Envoy v3 clusters and load assignments (TranslateService,
// AssignFailover) and serves them to the sidecars over ADS, state of the
// world or delta (Server), built on go-control-plane's snapshot cache.
//
// Every sidecar receives one EDS cluster per Service port, named as Istio
// names them (ClusterName: outbound|80||echo.default.svc.cluster.local),
// plus meshmeta.LocalClusterName with the endpoints of its own Service,
// so that zone-aware routing sees both sides. Endpoints carry their
// locality (from the EndpointSlice endpoint's zone, else the Node's
// topology labels), their health (ready -> HEALTHY, serving and
// terminating -> DRAINING, else UNHEALTHY) and whether their pod is
// meshed. Per-service load-balancing settings come from the Service's
// annotations, listed in ../ANNOTATIONS.md.
//
// # Routes (Gateway API for mesh, GAMMA)
//
// HTTPRoutes and GRPCRoutes (gateway.networking.k8s.io/v1,
// RunInformersWithRoutes) whose parentRefs name a Service (group "",
// kind Service) route the requests sent to that Service's cluster IPs. A
// route in the Service's namespace is a producer route and applies to
// every client; one in another namespace is a consumer route, applies
// only to sidecars of its own namespace, and for them replaces the
// Service's producer routes on all its ports (GEP-1294). A parentRef's
// port (the Service port's number) and sectionName (its name) restrict
// it to that port, else it attaches to every TCP port; headless and
// ExternalName Services are no parents. Hostnames are ignored, as
// GEP-1294 asks of meshes. Cross-namespace backends need no
// ReferenceGrant: GEP-1294 exempts mesh routes, which reach nothing their
// clients could not reach anyway.
//
// Every Service port with an attached route gets one Envoy
// RouteConfiguration named as its cluster (outbound|80||echo.ns.svc...),
// with one virtual host for "*", and that cluster names it in
// filter_metadata["meshlet.io"]["route_config"] (meshmeta.RouteConfigField)
// in the snapshots of the sidecars the routes apply to; the sidecar
// subscribes to it over the same ADS stream (RDS). It is keyed by cluster
// and not by listener because the sidecar routes by original
// destination to a cluster, and so that a change of one route pushes one
// small resource. Sidecars whose namespace has consumer routes form
// groups of their own (the group key gains the namespace only then).
//
// One route kind applies to a Service port: where GRPCRoutes and
// HTTPRoutes of one audience (the producer's, or one consumer
// namespace's) attach to the same port, only the GRPCRoutes apply, and
// the HTTPRoutes' Accepted is False with reason Conflicted (True, naming
// the ports held, when they keep other ports). That is GEP-1294's rule
// (route kinds in the order GRPCRoute, HTTPRoute, TLSRoute, TCPRoute;
// Linkerd does the same), and the GRPCRoute spec forbids merging the two
// kinds' rules. Istio merges them into one table, both Accepted (so far
// for Gateway listeners, istio/istio#59222); meshlet does not.
//
// Each rule match becomes one route, in its kind's precedence over all
// routes of the parent port (first match wins, as in Envoy). HTTPRoute:
// exact path, then regular expression (its place is the implementation's:
// before the prefixes, so that a catch-all "/" does not hide it), then the
// longest prefix, a method, the most headers, the most query parameters.
// GRPCRoute: the most characters of service, then of method (a regular
// expression's own characters), then the most headers. Then, for both,
// the oldest route, namespace/name, rule and match order.
//
// HTTPRoute translates path, header (":method" for the method) and query
// matches, exact or RE2; RequestHeaderModifier and ResponseHeaderModifier
// on rules and backendRefs; RequestRedirect (its port defaulting to the
// scheme's, else the Service port); URLRewrite (host, full path, prefix);
// weighted Service backends, an invalid one's share answered 500 through
// a cluster that does not exist, all invalid or all weights 0 a direct
// 500; timeouts (request, default 0s, none, as Istio does;
// backendRequest per try); GEP-1731 retry, else the Service's annotated
// retry policy. A rule with a filter meshlet cannot carry out
// (RequestMirror, CORS, ExternalAuth) is dropped; an ExtensionRef
// answers 500.
//
// GRPCRoute matches the method on the path gRPC sends, /service/method:
// Exact service and method the exact path, service alone the prefix
// /service/, method alone /[^/]+/method; RegularExpression the RE2
// expression /(service)/(method), an unset part one path segment.
// Headers, header modifiers (rule and backendRef), weights, the dropped
// RequestMirror and ExtensionRef's 500 are as for HTTPRoute. An invalid
// backend's share and a rule with nothing to forward to answer 503, which
// gRPC clients read as UNAVAILABLE (the sidecar's local replies to gRPC
// requests say grpc-status 14), the status the GRPCRoute spec asks for.
// No timeout; the Service's retry policy.
//
// The status (MeshControllerName's status.parents entries: Accepted,
// ResolvedRefs, PartiallyInvalid) of both kinds is written by a
// rate-limited workqueue, only when it differs, with the resourceVersion
// read, so replicas never fight.
//
// # Security policies (Istio's PeerAuthentication and AuthorizationPolicy)
//
// RunAllInformers watches security.istio.io/v1 PeerAuthentications and
// AuthorizationPolicies. For each sidecar whose node id names a pod, the
// policies that select it (root namespace mesh-wide, its namespace,
// selectors, Service targetRefs) resolve into its mTLS modes (the pod's
// meshlet.io/mtls-mode annotation over workload, namespace and mesh
// PeerAuthentications, UNSET inheriting) and Envoy RBAC filters, Istio's
// rules translated as Istio generates them (translateAuthorizationPolicies);
// a policy that cannot be translated makes the workloads it selects allow
// nothing. They go out as the seven ECDS resources of
// meshmeta.InboundExtensionNames, and sidecars with the same selection
// share a snapshot (the group key gains the selection). Each policy's
// status gets a MeshletAccepted condition (PolicyConditionType).
//
// The sidecar side (package discovery/adsclient) translates what it
// receives with the same functions as the static config file
// (discovery.TranslateCluster and discovery.TranslateClusterLoadAssignment),
// so the two paths cannot drift apart. The names both sides agree on beyond
// Envoy's API, meshlet's metadata keys and the local cluster's name, are in
// package discovery/meshmeta: cmd/injector links neither the translation
// nor the client.
package xds
