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
// The sidecar side (package discovery/adsclient) translates what it
// receives with the same functions as the static config file
// (discovery.TranslateCluster and discovery.TranslateClusterLoadAssignment),
// so the two paths cannot drift apart. The names both sides agree on beyond
// Envoy's API, meshlet's metadata keys and the local cluster's name, are in
// package discovery/meshmeta: cmd/injector links neither the translation
// nor the client.
package xds
