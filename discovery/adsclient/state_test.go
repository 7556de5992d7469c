package adsclient

import (
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshlet-dev/meshlet/lb"
)

func anyOf(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func edsClusterNamed(t *testing.T, name, eds string) *anypb.Any {
	var c clusterv3.Cluster
	fromYAML(t, "name: "+name+"\ntype: EDS\neds_cluster_config: {eds_config: {ads: {}}, service_name: "+eds+"}\n", &c)
	return anyOf(t, &c)
}

func assignment(t *testing.T, name string, addrs ...string) *anypb.Any {
	y := "cluster_name: " + name + "\nendpoints: [{lb_endpoints: ["
	for i, a := range addrs {
		if i > 0 {
			y += ", "
		}
		y += "{endpoint: {address: {socket_address: {address: " + a + ", port_value: 80}}}}"
	}
	var cla endpointv3.ClusterLoadAssignment
	fromYAML(t, y+"]}]\n", &cla)
	return anyOf(t, &cla)
}

// TestADSStateSotw: a cluster is delivered only with its assignment; a
// bad response changes nothing; assignments no cluster needs are dropped.
func TestADSStateSotw(t *testing.T) {
	st := newADSState()
	if _, _, ok := st.assemble(); ok {
		t.Fatal("complete before CDS")
	}
	if err := st.applySotwCDS(nil); err != nil {
		t.Fatal(err)
	}
	if cs, _, ok := st.assemble(); !ok || len(cs) != 0 {
		t.Fatalf("empty CDS: %v %v", cs, ok)
	}
	if err := st.applySotwCDS([]*anypb.Any{edsClusterNamed(t, "a", "a-eds"), edsClusterNamed(t, "b", "")}); err != nil {
		t.Fatal(err)
	}
	eq(t, st.edsNames(), []string{"a-eds", "b"})
	if _, _, ok := st.assemble(); ok {
		t.Fatal("complete without assignments")
	}
	if err := st.applySotwEDS([]*anypb.Any{assignment(t, "a-eds", "10.0.0.1"), assignment(t, "unrelated", "10.0.0.9")}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := st.assemble(); ok {
		t.Fatal("complete without b's assignment")
	}
	if err := st.applySotwEDS([]*anypb.Any{assignment(t, "b", "10.0.0.2", "10.0.0.3")}); err != nil {
		t.Fatal(err)
	}
	cs, _, ok := st.assemble()
	if !ok {
		t.Fatal("incomplete")
	}
	eq(t, []string{cs[0].Name, cs[1].Name}, []string{"a", "b"})
	eq(t, len(cs[0].Endpoints), 1)
	eq(t, len(cs[1].Endpoints), 2)

	// One bad resource rejects the response; what was there stays.
	err := st.applySotwEDS([]*anypb.Any{assignment(t, "a-eds", "10.0.0.5"), assignment(t, "b", "not-an-ip")})
	wantErr(t, err, `load assignment "b"`, `"not-an-ip" is not an IP address`)
	err = st.applySotwCDS([]*anypb.Any{edsClusterNamed(t, "a", "a-eds"), edsClusterNamed(t, "a", "a-eds"), anyOf(t, &endpointv3.ClusterLoadAssignment{})})
	wantErr(t, err, `CDS resources[1]: duplicate cluster "a"`, "CDS resources[2]: @type type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment")
	again, _, _ := st.assemble()
	eq(t, again, cs)

	// Dropping b drops its assignment.
	if err := st.applySotwCDS([]*anypb.Any{edsClusterNamed(t, "a", "a-eds")}); err != nil {
		t.Fatal(err)
	}
	eq(t, len(st.clas), 1)
}

func TestADSStateDelta(t *testing.T) {
	st := newADSState()
	res := func(name string, a *anypb.Any) *discoveryResource {
		return &discoveryResource{name: name, version: "v-" + name, resource: a}
	}
	if err := st.applyDeltaCDS([]*discoveryResource{res("a", edsClusterNamed(t, "a", "a")), res("b", edsClusterNamed(t, "b", "b"))}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.applyDeltaEDS([]*discoveryResource{res("a", assignment(t, "a", "10.0.0.1")), res("b", assignment(t, "b", "10.0.0.2"))}, nil); err != nil {
		t.Fatal(err)
	}
	eq(t, st.clusters["a"].version, "v-a")
	eq(t, st.clas["b"].version, "v-b")
	// A removed assignment a cluster still needs leaves it empty.
	if err := st.applyDeltaEDS(nil, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	cs, _, ok := st.assemble()
	if !ok {
		t.Fatal("incomplete")
	}
	eq(t, len(cs[1].Endpoints), 0)
	eq(t, cs[1].OverprovisioningFactor, uint32(lb.DefaultOverprovisioningFactor))
	// Removing a cluster; a resource under another name is an error.
	if err := st.applyDeltaCDS(nil, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	eq(t, st.edsNames(), []string{"a"})
	err := st.applyDeltaCDS([]*discoveryResource{res("c", edsClusterNamed(t, "a", "a"))}, nil)
	wantErr(t, err, `resource "c" holds cluster "a"`)
}

func TestBackoff(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: time.Second}
	for i, ceil := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		ceil *= time.Millisecond
		if ceil > time.Second {
			ceil = time.Second
		}
		d := b.next()
		if d < ceil/2 || d > ceil {
			t.Fatalf("attempt %d: %v not in [%v, %v]", i, d, ceil/2, ceil)
		}
	}
	b.reset()
	if d := b.next(); d > 100*time.Millisecond {
		t.Fatalf("after reset: %v", d)
	}
}

// TestADSStateReusesUnchangedAssignments: a state-of-the-world EDS
// response that repeats an accepted assignment byte for byte reuses its
// translation; a changed one is translated again.
func TestADSStateReusesUnchangedAssignments(t *testing.T) {
	st := newADSState()
	if err := st.applySotwCDS([]*anypb.Any{edsClusterNamed(t, "a", ""), edsClusterNamed(t, "b", "")}); err != nil {
		t.Fatal(err)
	}
	if err := st.applySotwEDS([]*anypb.Any{assignment(t, "a", "10.0.0.1"), assignment(t, "b", "10.0.0.2")}); err != nil {
		t.Fatal(err)
	}
	a0, b0 := &st.clas["a"].la.Endpoints[0], &st.clas["b"].la.Endpoints[0]
	if err := st.applySotwEDS([]*anypb.Any{assignment(t, "a", "10.0.0.1"), assignment(t, "b", "10.0.0.3")}); err != nil {
		t.Fatal(err)
	}
	if &st.clas["a"].la.Endpoints[0] != a0 {
		t.Error("the unchanged assignment a was translated again")
	}
	if &st.clas["b"].la.Endpoints[0] == b0 || st.clas["b"].la.Endpoints[0].Address != "10.0.0.3:80" {
		t.Errorf("the changed assignment b: %+v", st.clas["b"].la.Endpoints)
	}
	cs, _, ok := st.assemble()
	if !ok || cs[0].Endpoints[0].Address != "10.0.0.1:80" || cs[1].Endpoints[0].Address != "10.0.0.3:80" {
		t.Fatalf("assembled %v %+v", ok, cs)
	}
}

// routedCluster is an EDS cluster of a Service at 10.96.0.1:80 whose
// requests go by the route configuration rc ("" for none).
func routedCluster(t *testing.T, name, rc string) *anypb.Any {
	var c clusterv3.Cluster
	md := "{service: echo, port: 80, addresses: [10.96.0.1]"
	if rc != "" {
		md += ", route_config: \"" + rc + "\""
	}
	fromYAML(t, "name: "+name+"\ntype: EDS\neds_cluster_config: {eds_config: {ads: {}}}\nmetadata: {filter_metadata: {meshlet.io: "+md+"}}}\n", &c)
	return anyOf(t, &c)
}

func routeConfiguration(t *testing.T, name, cluster string) *anypb.Any {
	var rc routev3.RouteConfiguration
	fromYAML(t, "name: "+name+"\nvirtual_hosts: [{name: vh, domains: ['*'], routes: [{name: r0, match: {prefix: /}, route: {cluster: "+cluster+"}}]}]\n", &rc)
	return anyOf(t, &rc)
}

// TestADSStateRoutes: a cluster that names a route configuration goes
// as a plain route until RDS brings it (nothing else waits for it), its
// route then carrying the rules; a bad route configuration changes
// nothing; one removed while still named keeps its last good rules (as
// Envoy ignores such a removal); one no cluster names is forgotten, and
// a broken one nobody asked for is not even read.
func TestADSStateRoutes(t *testing.T) {
	st := newADSState()
	res := func(name string, a *anypb.Any) *discoveryResource {
		return &discoveryResource{name: name, version: "v-" + name, resource: a}
	}
	if err := st.applyDeltaCDS([]*discoveryResource{res("a", routedCluster(t, "a", "rc-a")), res("b", routedCluster(t, "b", ""))}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.applyDeltaEDS([]*discoveryResource{res("a", assignment(t, "a", "10.0.0.1")), res("b", assignment(t, "b", "10.0.0.2"))}, nil); err != nil {
		t.Fatal(err)
	}
	eq(t, st.names(routeTypeURL), []string{"rc-a"})
	plain := func(what string) {
		t.Helper()
		_, routes, ok := st.assemble()
		if !ok || len(routes) != 2 || routes[0].RouteConfig != "" || routes[0].Rules != nil || routes[0].Cluster != "a" {
			t.Fatalf("%s: ok %v, routes %+v; want a plain route to a", what, ok, routes)
		}
	}
	plain("before RDS")
	var bad routev3.RouteConfiguration
	fromYAML(t, "name: rc-a\nvirtual_hosts: [{name: vh, domains: [echo]}]\n", &bad)
	// Not asked for (even broken), then a bad one, then one under
	// another name: none counts.
	if err := st.applyDeltaRDS([]*discoveryResource{res("other", anyOf(t, &bad))}, nil); err != nil {
		t.Fatal(err)
	}
	wantErr(t, st.applyDeltaRDS([]*discoveryResource{res("rc-a", anyOf(t, &bad))}, nil), `route configuration "rc-a"`, "domains")
	plain("after a rejected route configuration")
	wantErr(t, st.applyDeltaRDS([]*discoveryResource{res("rc-a", routeConfiguration(t, "other", "b"))}, nil), `resource "rc-a" holds route configuration "other"`)

	if err := st.applyDeltaRDS([]*discoveryResource{res("rc-a", routeConfiguration(t, "rc-a", "b"))}, nil); err != nil {
		t.Fatal(err)
	}
	withRules := func(what string) {
		t.Helper()
		_, routes, ok := st.assemble()
		if !ok || len(routes) != 2 {
			t.Fatalf("%s: ok %v, %d routes", what, ok, len(routes))
		}
		eq(t, routes[0].RouteConfig, "rc-a")
		eq(t, len(routes[0].Rules), 1)
		eq(t, routes[0].Rules[0].Backends[0].Cluster, "b")
		eq(t, routes[1].RouteConfig, "")
		eq(t, len(routes[1].Rules), 0)
	}
	withRules("with RDS")
	eq(t, st.version(routeTypeURL, "rc-a"), "v-rc-a")
	// A bad update keeps the good rules.
	wantErr(t, st.applyDeltaRDS([]*discoveryResource{res("rc-a", anyOf(t, &bad))}, nil), "domains")
	withRules("after a rejected update")
	// Removed while named: ignored.
	if err := st.applyDeltaRDS(nil, []string{"rc-a"}); err != nil {
		t.Fatal(err)
	}
	withRules("after the removal")
	// The cluster no longer names it: forgotten, and no longer asked for.
	if err := st.applyDeltaCDS([]*discoveryResource{res("a", routedCluster(t, "a", ""))}, nil); err != nil {
		t.Fatal(err)
	}
	eq(t, len(st.names(routeTypeURL)), 0)
	eq(t, len(st.rcs), 0)
}

// TestADSStateRoutesSotw: state-of-the-world RDS keeps only what the
// clusters name, ignores the rest even when it is broken, and is all or
// nothing for what they name.
func TestADSStateRoutesSotw(t *testing.T) {
	st := newADSState()
	if err := st.applySotwCDS([]*anypb.Any{routedCluster(t, "a", "rc-a")}); err != nil {
		t.Fatal(err)
	}
	if err := st.applySotwEDS([]*anypb.Any{assignment(t, "a", "10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	var bad routev3.RouteConfiguration
	fromYAML(t, "name: unasked\nvirtual_hosts: [{name: vh, domains: [echo]}]\n", &bad)
	if err := st.applySotwRDS([]*anypb.Any{routeConfiguration(t, "rc-a", "a"), anyOf(t, &bad)}); err != nil {
		t.Fatal(err)
	}
	_, routes, ok := st.assemble()
	if !ok || len(routes) != 1 || len(routes[0].Rules) != 1 {
		t.Fatalf("ok %v, routes %+v", ok, routes)
	}
	fromYAML(t, "name: rc-a\nvirtual_hosts: [{name: vh, domains: [echo]}]\n", &bad)
	wantErr(t, st.applySotwRDS([]*anypb.Any{anyOf(t, &bad)}), `route configuration "rc-a"`)
	if _, routes, _ := st.assemble(); len(routes[0].Rules) != 1 {
		t.Fatalf("a rejected response changed the rules: %+v", routes[0])
	}
	eq(t, len(st.rcs), 1)
}
