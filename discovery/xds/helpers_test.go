package xds

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/lb"
)

func ptr[T any](v T) *T { return &v }

// service returns a ClusterIP Service with the given ports ("http:80",
// "grpc:9090", ":80" for an unnamed one) and annotations.
func service(ns, name string, ann map[string]string, ports ...string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}},
	}
	for _, p := range ports {
		pn, num, _ := strings.Cut(p, ":")
		var n int32
		fmt.Sscan(num, &n)
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: pn, Port: n, Protocol: corev1.ProtocolTCP,
			TargetPort: intstr.FromInt32(n + 8000)})
	}
	return svc
}

// ep is a test endpoint: address, pod, node, zone ("" = unset) and
// conditions ("ready", "notready", "terminating-serving", "terminating").
type ep struct {
	addr, pod, node, zone, cond string
}

// slice returns an EndpointSlice of service svc with the given ports
// ("http:8080") and endpoints.
func slice(ns, name, svc string, family discoveryv1.AddressType, ports []string, eps ...ep) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
	}
	for _, p := range ports {
		pn, num, _ := strings.Cut(p, ":")
		var n int32
		fmt.Sscan(num, &n)
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr(pn), Port: ptr(n), Protocol: ptr(corev1.ProtocolTCP)})
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: []string{e.addr}}
		if e.pod != "" {
			x.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.pod}
		}
		if e.node != "" {
			x.NodeName = ptr(e.node)
		}
		if e.zone != "" {
			x.Zone = ptr(e.zone)
		}
		switch e.cond {
		case "", "ready":
			x.Conditions = discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
		case "notready":
			x.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
		case "terminating-serving":
			x.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
		case "terminating":
			x.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
		default:
			panic("unknown condition " + e.cond)
		}
		es.Endpoints = append(es.Endpoints, x)
	}
	return es
}

// node returns a Node with topology labels (empty ones left out).
func node(name, region, zone, subzone string) *corev1.Node {
	labels := map[string]string{}
	for k, v := range map[string]string{lb.LabelRegion: region, lb.LabelZone: zone, lb.LabelSubZone: subzone} {
		if v != "" {
			labels[k] = v
		}
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// threeZones are nodes n-a, n-b, n-c in region r1, zones a, b, c.
func threeZones() map[string]*corev1.Node {
	return map[string]*corev1.Node{
		"n-a": node("n-a", "r1", "a", ""),
		"n-b": node("n-b", "r1", "b", ""),
		"n-c": node("n-c", "r1", "c", ""),
	}
}

// pod returns a Pod of service account sa ("" unset) on node ("" none),
// meshed (with the injector's status annotation) or not.
func pod(ns, name, sa, node string, meshed bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node}}
	if meshed {
		p.Annotations = map[string]string{statusAnnotation: "injected"}
	}
	return p
}

func nn(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

func eq[T any](t *testing.T, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	testtool.WantErr(t, err, parts...)
}
