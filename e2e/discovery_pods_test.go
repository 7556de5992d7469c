//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshlet-dev/meshlet/discovery"
	"github.com/meshlet-dev/meshlet/discovery/adsclient"
	"github.com/meshlet-dev/meshlet/discovery/xds"
	"github.com/meshlet-dev/meshlet/lb"
)

// TestDiscoveryPodsAgainstARealAPIServer: what discovery reads of pods
// comes from the informers' listers. An endpoint's pod annotated as
// injected is meshed with its ServiceAccount's SPIFFE ID, also when the
// annotation comes later (a pod update); a sidecar whose node id names a
// pod gets the failover priorities of that pod's node's zone over the one
// it reports, and the reported one again once the pod is deleted.
func TestDiscoveryPodsAgainstARealAPIServer(t *testing.T) {
	c := StartCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := c.Client
	c.zonedNodesAndShop(t, ctx, "a", "b")
	if _, err := cs.CoreV1().Services("shop").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web",
		Annotations: map[string]string{xds.AnnotationFailoverLabels: lb.LabelRegion + "," + lb.LabelZone}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pods bound to a node, and Running and Ready with an IP through the
	// status subresource (there are no kubelets).
	runPod := func(name, app, node, ip string, ann map[string]string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}, Annotations: ann},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "c:1"}}}}
		p, err := cs.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}
		if _, err := cs.CoreV1().Pods("shop").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	injected := map[string]string{"meshlet.io/status": `{"version":"test"}`}
	runPod("web-a", "web", "node-a", "10.244.1.10", injected)
	runPod("web-b", "web", "node-b", "10.244.2.10", nil)
	runPod("client", "client", "node-b", "10.244.2.20", nil)

	cp := xds.NewServer(xds.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go cp.Run(ctx)
	go xds.RunInformers(ctx, cs, cp, 0)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	cp.Register(g)
	go g.Serve(l)
	defer g.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The pod "client" of namespace shop, which reports zone a but runs on
	// node-b in zone b.
	client, err := adsclient.New(adsclient.Options{Conn: conn,
		Node:           &corev3.Node{Id: "client.shop", Locality: &corev3.Locality{Region: "r1", Zone: "zone-a"}},
		InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go client.Run(ctx)

	name := xds.ClusterName(xds.ServiceHost(types.NamespacedName{Namespace: "shop", Name: "web"}, xds.DefaultClusterDomain), 80)
	// endpoint describes each endpoint as "priority meshed identity".
	endpoints := func() map[string]string {
		out := map[string]string{}
		for _, cl := range client.Clusters() {
			if cl.Name == name {
				for _, e := range cl.Endpoints {
					out[e.Address] = fmt.Sprintf("p%d %q %s", e.Priority, e.Metadata[discovery.MeshedMetadataKey], e.Metadata[discovery.IdentityMetadataKey])
				}
			}
		}
		return out
	}
	wait := func(what string, want map[string]string) {
		t.Helper()
		waitFor(t, what, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
			got := endpoints()
			return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
		})
	}
	id := "spiffe://cluster.local/ns/shop/sa/default"
	wait("web-a meshed, zone b first (client's node)", map[string]string{
		"10.244.1.10:8080": `p1 "true" ` + id,
		"10.244.2.10:8080": `p0 "" `,
	})
	patch := []byte(`{"metadata":{"annotations":{"meshlet.io/status":"{\"version\":\"test\"}"}}}`)
	if _, err := cs.CoreV1().Pods("shop").Patch(ctx, "web-b", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("web-b meshed after its annotation", map[string]string{
		"10.244.1.10:8080": `p1 "true" ` + id,
		"10.244.2.10:8080": `p0 "true" ` + id,
	})
	zero := int64(0)
	if err := cs.CoreV1().Pods("shop").Delete(ctx, "client", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	wait("zone a first (reported) once the client pod is gone", map[string]string{
		"10.244.1.10:8080": `p0 "true" ` + id,
		"10.244.2.10:8080": `p1 "true" ` + id,
	})
}
