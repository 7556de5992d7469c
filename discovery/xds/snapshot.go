package xds

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/meshlet-dev/meshlet/discovery/meshmeta"
	"github.com/meshlet-dev/meshlet/lb"
)

// hashed is a resource with the hash of its deterministic encoding, which
// serves as its delta resource version and feeds the type's version.
type hashed struct {
	name     string
	resource types.Resource
	version  string
}

func hashResource(name string, m proto.Message) hashed {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		// Messages built here always encode; a failure still gets a
		// version that changes on every build rather than a stale one.
		b = []byte(err.Error())
	}
	return hashed{name: name, resource: m, version: strconv.FormatUint(xxhash.Sum64(b), 36)}
}

// translatedService is one Service's translation, ready for snapshots.
type translatedService struct {
	clusters []ServiceCluster
	cds      []hashed // per cluster
	eds      []hashed // per cluster, before AssignFailover
	// routed are the clusters naming their RouteConfiguration, made when
	// a group first needs one (guarded by the server's model lock).
	routed []hashed
	err    error
}

// routedCluster is the i-th cluster with filter_metadata["meshlet.io"]
// naming its RouteConfiguration, which is named as the cluster.
func (t *translatedService) routedCluster(i int) hashed {
	if t.routed == nil {
		t.routed = make([]hashed, len(t.clusters))
	}
	if t.routed[i].name == "" {
		c := proto.Clone(t.clusters[i].Cluster).(*clusterv3.Cluster)
		if c.Metadata == nil {
			c.Metadata = &corev3.Metadata{}
		}
		if c.Metadata.FilterMetadata == nil {
			c.Metadata.FilterMetadata = map[string]*structpb.Struct{}
		}
		md := c.Metadata.FilterMetadata[meshmeta.MetadataNamespace]
		if md == nil {
			md = &structpb.Struct{}
			c.Metadata.FilterMetadata[meshmeta.MetadataNamespace] = md
		}
		if md.Fields == nil {
			md.Fields = map[string]*structpb.Value{}
		}
		md.Fields[meshmeta.RouteConfigField] = structpb.NewStringValue(c.GetName())
		t.routed[i] = hashResource(c.GetName(), c)
	}
	return t.routed[i]
}

func newTranslatedService(scs []ServiceCluster, err error) *translatedService {
	t := &translatedService{clusters: scs, err: err}
	for _, sc := range scs {
		t.cds = append(t.cds, hashResource(sc.Cluster.GetName(), sc.Cluster))
		t.eds = append(t.eds, hashResource(sc.LoadAssignment.GetClusterName(), sc.LoadAssignment))
	}
	return t
}

// groupKey is what makes two sidecars' snapshots differ: the locality
// failover priorities are computed for, the local cluster, and the
// client namespace when it has consumer routes (else "").
type groupKey struct {
	locality   lb.Locality
	local      k8stypes.NamespacedName
	consumerNS string
	// policy is the key of the security policies that apply
	// (inboundPolicyLocked).
	policy string
}

// groupSnapshot is the snapshot every sidecar of a group gets.
type groupSnapshot struct {
	snap    *cachev3.Snapshot
	version string // cluster, endpoint and route versions together
}

// failoverKey identifies an AssignFailover result: the assignment (by
// name and version), the labels and the client locality.
type failoverKey struct {
	base, labels string
	locality     lb.Locality
}

// localEntry is a Service's local cluster, for the version of the
// assignment it was made from.
type localEntry struct {
	base      string
	resources [2]hashed
}

// generation caches what snapshots are built from until the next change
// of the translations. Failover assignments and local clusters of
// unchanged Services carry over from the previous generation, so a change
// of one Service does not recompute every other Service's priorities.
type generation struct {
	groups       map[groupKey]*groupSnapshot
	failover     map[failoverKey]hashed
	local        map[k8stypes.NamespacedName]localEntry
	prevFailover map[failoverKey]hashed
	prevLocal    map[k8stypes.NamespacedName]localEntry
}

// newGeneration starts a generation after prev (nil for the first).
func newGeneration(prev *generation) *generation {
	g := &generation{groups: map[groupKey]*groupSnapshot{}, failover: map[failoverKey]hashed{},
		local: map[k8stypes.NamespacedName]localEntry{}}
	if prev != nil {
		g.prevFailover, g.prevLocal = prev.failover, prev.local
	}
	return g
}

// assigned returns the failover assignment of the i-th cluster of t for a
// client locality.
func (g *generation) assigned(t *translatedService, i int, locality lb.Locality) hashed {
	fk := failoverKey{base: t.eds[i].name + "\x00" + t.eds[i].version,
		labels: strings.Join(t.clusters[i].FailoverLabels, ","), locality: locality}
	if h, ok := g.failover[fk]; ok {
		return h
	}
	h, ok := g.prevFailover[fk]
	if !ok {
		sc := t.clusters[i]
		cla := AssignFailover(sc.LoadAssignment, locality, sc.FailoverLabels)
		h = hashResource(cla.GetClusterName(), cla)
	}
	g.failover[fk] = h
	return h
}

// buildGroup builds the snapshot of a group from the translated services
// and the RouteConfigurations of the routes attached to them: a cluster
// with routes for the group's clients names its RouteConfiguration.
func (g *generation) buildGroup(key groupKey, services map[k8stypes.NamespacedName]*translatedService,
	routes map[k8stypes.NamespacedName]*parentRoutes, ext []hashed) *groupSnapshot {
	if gs, ok := g.groups[key]; ok {
		return gs
	}
	var cds, eds, rds []hashed
	for _, name := range slices.SortedFunc(maps.Keys(services), compareNames) {
		t := services[name]
		if t.err != nil {
			continue
		}
		rcs := routes[name].forNamespace(key.consumerNS)
		for i, sc := range t.clusters {
			if rc, ok := rcs[sc.Cluster.GetName()]; ok {
				cds, rds = append(cds, t.routedCluster(i)), append(rds, rc)
			} else {
				cds = append(cds, t.cds[i])
			}
			if len(sc.FailoverLabels) == 0 {
				eds = append(eds, t.eds[i])
				continue
			}
			eds = append(eds, g.assigned(t, i, key.locality))
		}
	}
	if lc, ok := g.localCluster(key.local, services); ok {
		cds, eds = append(cds, lc[0]), append(eds, lc[1])
	}
	gs := &groupSnapshot{snap: newSnapshot(cds, eds, rds, ext)}
	gs.version = gs.snap.GetVersion(resource.ClusterType) + "/" + gs.snap.GetVersion(resource.EndpointType) +
		"/" + gs.snap.GetVersion(resource.RouteType) + "/" + gs.snap.GetVersion(resource.ExtensionConfigType)
	g.groups[key] = gs
	return gs
}

// localCluster returns meshmeta.LocalClusterName for a sidecar of svc:
// the endpoints of the Service's first port (every port has the same
// pods), at priority 0 as Envoy requires of a local cluster.
func (g *generation) localCluster(svc k8stypes.NamespacedName, services map[k8stypes.NamespacedName]*translatedService) ([2]hashed, bool) {
	t := services[svc]
	if svc.Name == "" || t == nil || t.err != nil || len(t.clusters) == 0 {
		return [2]hashed{}, false
	}
	base := t.eds[0].version
	if lc, ok := g.local[svc]; ok {
		return lc.resources, true
	}
	if lc, ok := g.prevLocal[svc]; ok && lc.base == base {
		g.local[svc] = lc
		return lc.resources, true
	}
	c := &clusterv3.Cluster{
		Name:                 meshmeta.LocalClusterName,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     edsConfig(meshmeta.LocalClusterName),
	}
	cla := proto.Clone(t.clusters[0].LoadAssignment).(*endpointv3.ClusterLoadAssignment)
	cla.ClusterName = meshmeta.LocalClusterName
	lc := [2]hashed{hashResource(c.Name, c), hashResource(cla.ClusterName, cla)}
	g.local[svc] = localEntry{base: base, resources: lc}
	return lc, true
}

// newSnapshot assembles a snapshot whose type versions and delta version
// map come from the resource hashes, so an unchanged set keeps its
// version (no push) and a restarted control plane gives the same
// versions for the same content (a resyncing sidecar gets no spurious
// update).
func newSnapshot(cds, eds, rds, ext []hashed) *cachev3.Snapshot {
	snap := &cachev3.Snapshot{VersionMap: map[string]map[string]string{}}
	for _, part := range []struct {
		typ   types.ResponseType
		url   string
		items []hashed
	}{{types.Cluster, resource.ClusterType, cds}, {types.Endpoint, resource.EndpointType, eds}, {types.Route, resource.RouteType, rds},
		{types.ExtensionConfig, resource.ExtensionConfigType, ext}} {
		h := xxhash.New()
		versions := make(map[string]string, len(part.items))
		items := make([]types.Resource, 0, len(part.items))
		for _, it := range part.items {
			_, _ = h.WriteString(it.name)
			_, _ = h.Write([]byte{0})
			_, _ = h.WriteString(it.version)
			_, _ = h.Write([]byte{0})
			versions[it.name] = it.version
			items = append(items, it.resource)
		}
		snap.Resources[part.typ] = cachev3.NewResources(strconv.FormatUint(h.Sum64(), 36), items)
		snap.VersionMap[part.url] = versions
	}
	return snap
}

func compareNames(a, b k8stypes.NamespacedName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}
