package xds

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshlet-dev/meshlet/discovery"
	"github.com/meshlet-dev/meshlet/lb"
)

func TestAssignFailover(t *testing.T) {
	nodes := map[string]*corev1.Node{
		"n-a": node("n-a", "r1", "a", ""), "n-b": node("n-b", "r1", "b", ""), "n-c": node("n-c", "r2", "c", ""),
	}
	sc := translateOne(t, ServiceInput{
		Service: service("default", "echo", map[string]string{AnnotationFailoverLabels: lb.LabelRegion + "," + lb.LabelZone}, "http:80"),
		Slices: []*discoveryv1.EndpointSlice{slice("default", "echo-1", "echo", v4, []string{"http:8080"},
			ep{addr: "10.0.0.1", node: "n-a"}, ep{addr: "10.0.0.2", node: "n-b"}, ep{addr: "10.0.0.3", node: "n-c"})},
		Nodes: nodes,
	})
	tests := []struct {
		name   string
		client lb.Locality
		labels []string
		want   map[string]uint32 // by zone
		levels int
	}{
		{"client in r1/a", lb.Locality{Region: "r1", Zone: "a"}, sc.FailoverLabels, map[string]uint32{"a": 0, "b": 1, "c": 2}, 3},
		{"client in r1/b", lb.Locality{Region: "r1", Zone: "b"}, sc.FailoverLabels, map[string]uint32{"a": 1, "b": 0, "c": 2}, 3},
		// No endpoint matches region only, so that level closes up.
		{"client in r2/c", lb.Locality{Region: "r2", Zone: "c"}, sc.FailoverLabels, map[string]uint32{"a": 1, "b": 1, "c": 0}, 2},
		{"client in a zone without endpoints", lb.Locality{Region: "r1", Zone: "z"}, sc.FailoverLabels, map[string]uint32{"a": 0, "b": 0, "c": 1}, 2},
		{"client locality unknown", lb.Locality{}, sc.FailoverLabels, map[string]uint32{"a": 0, "b": 0, "c": 0}, 1},
		{"zone only", lb.Locality{Region: "r1", Zone: "a"}, []string{lb.LabelZone}, map[string]uint32{"a": 0, "b": 1, "c": 1}, 2},
		{"no labels", lb.Locality{Region: "r1", Zone: "a"}, nil, map[string]uint32{"a": 0, "b": 0, "c": 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cla := AssignFailover(sc.LoadAssignment, tt.client, tt.labels)
			got := map[string]uint32{}
			for _, g := range cla.GetEndpoints() {
				got[g.GetLocality().GetZone()] = g.GetPriority()
			}
			eq(t, got, tt.want)
			// The sidecar reads the priorities the same way.
			la, err := discovery.TranslateEDSLoadAssignment(cla)
			if err != nil {
				t.Fatal(err)
			}
			eq(t, la.Priorities, tt.levels)
			for _, e := range la.Endpoints {
				eq(t, e.Priority, tt.want[e.Locality.Zone])
			}
		})
	}
	// The input is not modified.
	for _, g := range sc.LoadAssignment.GetEndpoints() {
		eq(t, g.GetPriority(), uint32(0))
	}
}
