//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/discovery/adsclient"
	"github.com/meshlet-dev/meshlet/discovery/xds"
	"github.com/meshlet-dev/meshlet/lb"
)

// TestDiscoveryAgainstARealAPIServer: zone-labelled Nodes, pods bound to
// them and marked Running/Ready through the status subresource, the real
// EndpointSlice controller; the control plane's informers and ADS server;
// a sidecar's ADS client sees the service's cluster with its zones and
// health, then a pod going not-ready and a deleted pod, and across a
// control-plane restart keeps its configuration and then resyncs.
func TestDiscoveryAgainstARealAPIServer(t *testing.T) {
	c := StartCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := c.Client
	c.zonedNodesAndShop(t, ctx, "a", "b", "c")
	svc, err := cs.CoreV1().Services("shop").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setReady := func(name string, ip string, ready bool) {
		p, err := cs.CoreV1().Pods("shop").Get(ctx, name, metaGet)
		if err != nil {
			t.Fatal(err)
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}, {Type: corev1.ContainersReady, Status: st}}
		if _, err := cs.CoreV1().Pods("shop").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, z := range []string{"a", "b", "c"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-" + z, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: "node-" + z, Containers: []corev1.Container{{Name: "web", Image: "web:1",
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}
		if _, err := cs.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		setReady(p.Name, fmt.Sprintf("10.244.%d.10", i+1), true)
	}

	// startControlPlane runs a control plane (server, informers, gRPC) on
	// addr; the returned func stops all of it, as a crash would.
	startControlPlane := func(addr string) (string, func()) {
		t.Helper()
		cpCtx, cancel := context.WithCancel(ctx)
		cp := xds.NewServer(xds.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		go cp.Run(cpCtx)
		go xds.RunInformers(cpCtx, cs, cp, 0)
		var l net.Listener
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if l, err = net.Listen("tcp", addr); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("control plane listen %s: %v", addr, err)
			}
		}
		g := grpc.NewServer()
		cp.Register(g)
		go g.Serve(l)
		return l.Addr().String(), func() { g.Stop(); cancel() }
	}
	addr, stopCP := startControlPlane("127.0.0.1:0")
	defer func() { stopCP() }()
	conn, _ := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	var streamsEnded atomic.Int64 // the client's lost streams and failed reconnections
	client, err := adsclient.New(adsclient.Options{Conn: conn,
		Node:           &corev3.Node{Id: "sidecar-1", Locality: &corev3.Locality{Region: "r1", Zone: "zone-a"}},
		InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second,
		Logger: slog.New(countRecords{slog.Default().Handler(), "ads stream ended; reconnecting", &streamsEnded})})
	if err != nil {
		t.Fatal(err)
	}
	go client.Run(ctx)

	name := xds.ClusterName(xds.ServiceHost(types.NamespacedName{Namespace: "shop", Name: "web"}, xds.DefaultClusterDomain), 80)
	wait := func(what string, want func(map[string]string) bool) {
		t.Helper()
		var last map[string]string
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			last = endpointsOf(client.Clusters(), name)
			if want(last) {
				return
			}
		}
		t.Fatalf("%s: cluster %q endpoints %v (clusters %d)\n%s", what, name, last, len(client.Clusters()), c.Log("kube-controller-manager"))
	}
	wait("three zones, healthy", func(m map[string]string) bool {
		return m["10.244.1.10:8080"] == "zone-a/healthy" && m["10.244.2.10:8080"] == "zone-b/healthy" && m["10.244.3.10:8080"] == "zone-c/healthy"
	})
	setReady("web-c", "10.244.3.10", false)
	wait("web-c not ready", func(m map[string]string) bool {
		return m["10.244.3.10:8080"] != "" && !strings.HasSuffix(m["10.244.3.10:8080"], "/healthy")
	})
	zero := int64(0)
	if err := cs.CoreV1().Pods("shop").Delete(ctx, "web-b", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	wait("web-b deleted", func(m map[string]string) bool { _, ok := m["10.244.2.10:8080"]; return !ok && len(m) == 2 })
	// The route carries the Service's cluster IP.
	found := false
	for _, r := range client.Routes() {
		found = found || (r.Cluster == name && r.Destination == svc.Spec.ClusterIP+":80")
	}
	if !found {
		t.Errorf("no route for %s:80 to %s: %+v", svc.Spec.ClusterIP, name, client.Routes())
	}

	// A control-plane restart: while it is down the sidecar keeps its last
	// configuration (a change made meanwhile is not seen); the new
	// instance resyncs from the API server and the sidecar gets the change.
	ended := streamsEnded.Load()
	stopCP()
	setReady("web-c", "10.244.3.10", true)
	// The lost stream, then failed reconnections: the sidecar has been
	// without its control plane a while, and keeps what it had.
	for deadline := time.Now().Add(30 * time.Second); streamsEnded.Load() < ended+4; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar logged %d lost streams or failed reconnections, want 4", streamsEnded.Load()-ended)
		}
	}
	if m := endpointsOf(client.Clusters(), name); len(m) != 2 || strings.HasSuffix(m["10.244.3.10:8080"], "/healthy") {
		t.Fatalf("with the control plane down the sidecar's endpoints changed to %v", m)
	}
	_, stopCP = startControlPlane(addr)
	wait("resynced after the control-plane restart", func(m map[string]string) bool {
		return len(m) == 2 && m["10.244.3.10:8080"] == "zone-c/healthy"
	})
}

// countRecords counts the log records whose message is msg, then hands
// every record to next.
type countRecords struct {
	next slog.Handler
	msg  string
	n    *atomic.Int64
}

func (h countRecords) Enabled(context.Context, slog.Level) bool { return true }

func (h countRecords) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h countRecords) WithAttrs(as []slog.Attr) slog.Handler {
	return countRecords{h.next.WithAttrs(as), h.msg, h.n}
}

func (h countRecords) WithGroup(g string) slog.Handler {
	return countRecords{h.next.WithGroup(g), h.msg, h.n}
}

// endpointsOf maps a cluster's endpoints to "zone/health".
func endpointsOf(clusters []config.Cluster, name string) map[string]string {
	out := map[string]string{}
	for _, c := range clusters {
		if c.Name != name {
			continue
		}
		for _, ep := range c.Endpoints {
			h := "healthy"
			switch ep.Health {
			case lb.EDSUnhealthy:
				h = "unhealthy"
			case lb.EDSDraining:
				h = "draining"
			}
			out[ep.Address] = ep.Locality.Zone + "/" + h
		}
	}
	return out
}

// zonedNodesAndShop creates Node objects node-<z> in zone-<z> of region r1
// for each z (no kubelet: the API objects discovery reads) and the
// namespace "shop", once its default ServiceAccount exists.
func (c *Cluster) zonedNodesAndShop(t *testing.T, ctx context.Context, zones ...string) {
	t.Helper()
	for _, z := range zones {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + z, Labels: map[string]string{lb.LabelRegion: "r1", lb.LabelZone: "zone-" + z}}}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitDefaultSA(t, "shop")
}
