package adsclient

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/discovery"
	"github.com/meshlet-dev/meshlet/lb"
)

// The xDS type URLs the client subscribes to.
var (
	clusterTypeURL  = typeURL(&clusterv3.Cluster{})
	endpointTypeURL = typeURL(&endpointv3.ClusterLoadAssignment{})
	routeTypeURL    = typeURL(&routev3.RouteConfiguration{})
)

func typeURL(m proto.Message) string {
	return "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName())
}

// maxReportedErrors bounds the errors a NACK lists.
const maxReportedErrors = 10

// cdsEntry is one accepted cluster.
type cdsEntry struct {
	cluster config.Cluster // without endpoints
	routes  []config.Route
	eds     string // the assignment it needs
	version string // delta resource version
}

// edsEntry is one accepted load assignment.
type edsEntry struct {
	la      discovery.LoadAssignment
	version string   // delta resource version
	name    string   // cluster_name of the assignment
	sum     [32]byte // SHA-256 of the encoded resource (state of the world)
}

// rdsEntry is one accepted route configuration.
type rdsEntry struct {
	rules   []config.RouteRule // shared by every delivery: never changed
	version string             // delta resource version
}

// adsState is what the client has accepted, across streams.
type adsState struct {
	clusters  map[string]*cdsEntry
	clas      map[string]*edsEntry
	rcs       map[string]*rdsEntry
	cdsSynced bool              // a CDS response was accepted
	versions  map[string]string // SotW version_info accepted, by type URL
	// extensions are the ECDS names subscribed to (Options.Extensions),
	// exts those accepted; extGen counts the changes.
	extensions []string
	exts       map[string]*extEntry
	extGen     int
}

func newADSState() adsState {
	return adsState{clusters: map[string]*cdsEntry{}, clas: map[string]*edsEntry{}, rcs: map[string]*rdsEntry{}, versions: map[string]string{},
		exts: map[string]*extEntry{}}
}

// names returns what the clusters need of a type subscribed by name
// (EDS or RDS), sorted.
func (s *adsState) names(typeURL string) []string {
	switch typeURL {
	case endpointTypeURL:
		return s.edsNames()
	case extensionTypeURL:
		return s.extNames()
	}
	return slices.Sorted(maps.Keys(s.rdsNeeded()))
}

// version is the delta version of an accepted resource ("" if none).
func (s *adsState) version(typeURL, name string) string {
	if typeURL == endpointTypeURL {
		if e, ok := s.clas[name]; ok {
			return e.version
		}
		return ""
	}
	if typeURL == extensionTypeURL {
		if e, ok := s.exts[name]; ok {
			return e.version
		}
		return ""
	}
	if e, ok := s.rcs[name]; ok {
		return e.version
	}
	return ""
}

// rdsNeeded is the set of route configurations the clusters' routes name.
func (s *adsState) rdsNeeded() map[string]bool {
	need := map[string]bool{}
	for _, e := range s.clusters {
		for _, r := range e.routes {
			if r.RouteConfig != "" {
				need[r.RouteConfig] = true
			}
		}
	}
	return need
}

// edsNames returns the assignments the clusters need, sorted.
func (s *adsState) edsNames() []string {
	set := make(map[string]bool, len(s.clusters))
	for _, e := range s.clusters {
		set[e.eds] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// dropUnused forgets assignments no cluster needs any more.
func (s *adsState) dropUnused() {
	need := make(map[string]bool, len(s.clusters))
	for _, e := range s.clusters {
		need[e.eds] = true
	}
	maps.DeleteFunc(s.clas, func(name string, _ *edsEntry) bool { return !need[name] })
	rds := s.rdsNeeded()
	maps.DeleteFunc(s.rcs, func(name string, _ *rdsEntry) bool { return !rds[name] })
}

// assemble returns the clusters with their endpoints and their routes
// with their rules, or ok false while CDS has not been accepted or a
// cluster still waits for its assignment. A route whose route
// configuration has not arrived (or was rejected, with no good one
// before it) goes as a plain route to its cluster meanwhile: one table
// must not hold back every other cluster's changes, as a failed RDS
// update does not hold back Envoy's.
func (s *adsState) assemble() (clusters []config.Cluster, routes []config.Route, ok bool) {
	if !s.cdsSynced {
		return nil, nil, false
	}
	clusters = make([]config.Cluster, 0, len(s.clusters))
	for _, name := range slices.Sorted(maps.Keys(s.clusters)) {
		e := s.clusters[name]
		la, ok := s.clas[e.eds]
		if !ok {
			return nil, nil, false
		}
		cl := e.cluster
		la.la.ApplyTo(&cl)
		clusters = append(clusters, cl)
		for _, r := range e.routes {
			if r.RouteConfig != "" {
				if rc, ok := s.rcs[r.RouteConfig]; ok {
					r.Rules = rc.rules
				} else {
					r.RouteConfig = ""
				}
			}
			routes = append(routes, r)
		}
	}
	return clusters, routes, true
}

// decodeRouteConfiguration translates the i-th resource of an RDS
// response.
func decodeRouteConfiguration(i int, a *anypb.Any) (string, *rdsEntry, error) {
	var rc routev3.RouteConfiguration
	if err := unmarshalResource(a, &rc); err != nil {
		return "", nil, fmt.Errorf("adsclient: RDS resources[%d]: %w", i, err)
	}
	rules, err := discovery.TranslateRouteConfiguration(&rc)
	if err != nil {
		return rc.GetName(), nil, err
	}
	return rc.GetName(), &rdsEntry{rules: rules}, nil
}

// applySotwRDS stores the route configurations of a state-of-the-world
// RDS response (which, like EDS, may hold only some of them), or changes
// nothing and returns why.
func (s *adsState) applySotwRDS(resources []*anypb.Any) error {
	return s.applyRouteConfigurations(sotwResources(resources), false)
}

// sotwResources wraps the resources of a state-of-the-world response.
func sotwResources(resources []*anypb.Any) []*discoveryResource {
	anys := make([]*discoveryResource, len(resources))
	for i, a := range resources {
		anys[i] = &discoveryResource{resource: a}
	}
	return anys
}

// applyDeltaRDS applies an incremental RDS response, all or nothing. The
// removal of a route configuration a route still names is ignored, its
// last good rules kept, as Envoy ignores it: the cluster's update that
// stops naming it may come second, and an empty table would answer every
// request 404 meanwhile.
func (s *adsState) applyDeltaRDS(resources []*discoveryResource, removed []string) error {
	if err := s.applyRouteConfigurations(resources, true); err != nil {
		return err
	}
	need := s.rdsNeeded()
	for _, name := range removed {
		if !need[name] {
			delete(s.rcs, name)
		}
	}
	return nil
}

// applyRouteConfigurations translates RDS resources (named, in delta)
// and stores those a route needs; all or nothing.
func (s *adsState) applyRouteConfigurations(resources []*discoveryResource, delta bool) error {
	need := s.rdsNeeded()
	next := map[string]*rdsEntry{}
	var errs errorList
	for i, r := range resources {
		if delta && !need[r.name] {
			continue // not asked for: not even translated
		}
		name, e, err := decodeRouteConfiguration(i, r.resource)
		switch {
		case !delta && !need[name]: // SotW names it inside: ignored, even broken
		case err != nil:
			errs.add(err)
		case delta && name != r.name:
			errs.add(fmt.Errorf("adsclient: RDS resources[%d]: resource %q holds route configuration %q", i, r.name, name))
		case next[name] != nil:
			errs.add(fmt.Errorf("adsclient: RDS resources[%d]: duplicate route configuration %q", i, name))
		default:
			e.version = r.version
			next[name] = e
		}
	}
	if err := errs.err(); err != nil {
		return err
	}
	maps.Copy(s.rcs, next)
	return nil
}

// decodeCluster translates the i-th resource of a CDS response.
func decodeCluster(i int, a *anypb.Any) (string, *cdsEntry, error) {
	var c clusterv3.Cluster
	if err := unmarshalResource(a, &c); err != nil {
		return "", nil, fmt.Errorf("adsclient: CDS resources[%d]: %w", i, err)
	}
	cl, err := discovery.TranslateEDSCluster(&c)
	if err != nil {
		return c.GetName(), nil, err
	}
	routes, err := discovery.ServiceRoutes(&c)
	if err != nil {
		return c.GetName(), nil, err
	}
	return c.GetName(), &cdsEntry{cluster: cl, routes: routes, eds: discovery.EDSServiceName(&c)}, nil
}

// decodeAssignment translates the i-th resource of an EDS response.
func decodeAssignment(i int, a *anypb.Any) (string, *edsEntry, error) {
	var cla endpointv3.ClusterLoadAssignment
	if err := unmarshalResource(a, &cla); err != nil {
		return "", nil, fmt.Errorf("adsclient: EDS resources[%d]: %w", i, err)
	}
	la, err := discovery.TranslateEDSLoadAssignment(&cla)
	if err != nil {
		return cla.GetClusterName(), nil, err
	}
	return cla.GetClusterName(), &edsEntry{la: la, name: cla.GetClusterName()}, nil
}

// unmarshalResource decodes a, which must hold m's type.
func unmarshalResource(a *anypb.Any, m proto.Message) error {
	if want := typeURL(m); a.GetTypeUrl() != want {
		return fmt.Errorf("@type %s (want %s)", a.GetTypeUrl(), want)
	}
	if err := a.UnmarshalTo(m); err != nil {
		return fmt.Errorf("decode %s: %w", a.GetTypeUrl(), err)
	}
	return nil
}

// errorList collects a response's rejections into one error_detail.
type errorList struct {
	errs []error
	more int
}

func (l *errorList) add(err error) {
	if len(l.errs) < maxReportedErrors {
		l.errs = append(l.errs, err)
	} else {
		l.more++
	}
}

func (l *errorList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(l.errs)+1)
	for _, e := range l.errs {
		msgs = append(msgs, e.Error())
	}
	if l.more > 0 {
		msgs = append(msgs, fmt.Sprintf("and %d more", l.more))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// applySotwCDS replaces the clusters with a state-of-the-world CDS
// response, or changes nothing and returns why.
func (s *adsState) applySotwCDS(resources []*anypb.Any) error {
	next := make(map[string]*cdsEntry, len(resources))
	var errs errorList
	for i, a := range resources {
		name, e, err := decodeCluster(i, a)
		switch {
		case err != nil:
			errs.add(err)
		case next[name] != nil:
			errs.add(fmt.Errorf("adsclient: CDS resources[%d]: duplicate cluster %q", i, name))
		default:
			next[name] = e
		}
	}
	if err := errs.err(); err != nil {
		return err
	}
	s.clusters, s.cdsSynced = next, true
	s.dropUnused()
	return nil
}

// applySotwEDS stores the assignments of a state-of-the-world EDS
// response (which may hold only some of them), or changes nothing and
// returns why. Assignments no cluster needs are ignored.
func (s *adsState) applySotwEDS(resources []*anypb.Any) error {
	return s.applyAssignments(resources, nil, nil)
}

// applyAssignments translates EDS resources (named by names in delta,
// by their cluster_name in SotW) and removes the removed ones; all or
// nothing.
func (s *adsState) applyAssignments(resources []*anypb.Any, names, versions []string) error {
	need := make(map[string]bool, len(s.clusters))
	for _, e := range s.clusters {
		need[e.eds] = true
	}
	next := map[string]*edsEntry{}
	// A state-of-the-world response (names nil) repeats every assignment;
	// the ones whose bytes did not change since they were accepted are not
	// decoded and translated again (with 10,000 endpoints that is most of
	// the cost of an update). Delta responses carry only changes.
	var known map[[32]byte]*edsEntry
	if names == nil {
		known = make(map[[32]byte]*edsEntry, len(s.clas))
		for _, e := range s.clas {
			if e.name != "" {
				known[e.sum] = e
			}
		}
	}
	claType := typeURL(&endpointv3.ClusterLoadAssignment{})
	var errs errorList
	for i, a := range resources {
		var sum [32]byte
		if known != nil {
			sum = sha256.Sum256(a.GetValue())
		}
		var name string
		var e *edsEntry
		var err error
		if old, ok := known[sum]; ok && a.GetTypeUrl() == claType {
			name, e = old.name, &edsEntry{la: old.la, name: old.name}
		} else {
			name, e, err = decodeAssignment(i, a)
		}
		if e != nil {
			e.sum = sum
		}
		if err == nil && names != nil && name != names[i] {
			err = fmt.Errorf("adsclient: EDS resources[%d]: resource %q holds load assignment %q", i, names[i], name)
		}
		switch {
		case err != nil:
			errs.add(err)
		case !need[name]:
		case next[name] != nil:
			errs.add(fmt.Errorf("adsclient: EDS resources[%d]: duplicate load assignment %q", i, name))
		default:
			if versions != nil {
				e.version = versions[i]
			}
			next[name] = e
		}
	}
	if err := errs.err(); err != nil {
		return err
	}
	maps.Copy(s.clas, next)
	return nil
}

// applyDeltaCDS applies an incremental CDS response, all or nothing.
func (s *adsState) applyDeltaCDS(resources []*discoveryResource, removed []string) error {
	next := maps.Clone(s.clusters)
	var errs errorList
	for i, r := range resources {
		name, e, err := decodeCluster(i, r.resource)
		switch {
		case err != nil:
			errs.add(err)
		case name != r.name:
			errs.add(fmt.Errorf("adsclient: CDS resources[%d]: resource %q holds cluster %q", i, r.name, name))
		default:
			e.version = r.version
			next[name] = e
		}
	}
	if err := errs.err(); err != nil {
		return err
	}
	for _, name := range removed {
		delete(next, name)
	}
	s.clusters, s.cdsSynced = next, true
	s.dropUnused()
	return nil
}

// applyDeltaEDS applies an incremental EDS response, all or nothing. A
// removed assignment that a cluster still needs leaves that cluster with
// no endpoints.
func (s *adsState) applyDeltaEDS(resources []*discoveryResource, removed []string) error {
	anys := make([]*anypb.Any, len(resources))
	names := make([]string, len(resources))
	versions := make([]string, len(resources))
	for i, r := range resources {
		anys[i], names[i], versions[i] = r.resource, r.name, r.version
	}
	if err := s.applyAssignments(anys, names, versions); err != nil {
		return err
	}
	need := map[string]bool{}
	for _, e := range s.clusters {
		need[e.eds] = true
	}
	for _, name := range removed {
		if need[name] {
			s.clas[name] = &edsEntry{la: discovery.LoadAssignment{OverprovisioningFactor: lb.DefaultOverprovisioningFactor}}
		} else {
			delete(s.clas, name)
		}
	}
	return nil
}

// discoveryResource is a delta response's resource.
type discoveryResource struct {
	name, version string
	resource      *anypb.Any
}

// equalConfig compares two deliveries.
func equalConfig[T any](a, b []T) bool { return reflect.DeepEqual(a, b) }

// cloneSlice returns a copy of s the callee may keep.
func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return slices.Clone(s)
}
