//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshlet-dev/meshlet/discovery/xds"
)

// countWarnings counts the log records at warning level and above.
type countWarnings struct {
	slog.Handler
	n *atomic.Int64
}

func (h countWarnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countWarnings) WithAttrs(as []slog.Attr) slog.Handler {
	return countWarnings{h.Handler.WithAttrs(as), h.n}
}

func (h countWarnings) WithGroup(name string) slog.Handler {
	return countWarnings{h.Handler.WithGroup(name), h.n}
}

// TestKindsInstalledLater: a control plane started on an API server
// without the Gateway API and Istio security CRDs serves no routes and no
// policies, saying so; once the chart's CRDs are applied it watches them
// without a restart: an AuthorizationPolicy and a PeerAuthentication
// created then get their MeshletAccepted status, and an HTTPRoute on a
// Service its status.parents entry, both written by the control plane
// from caches of informers started after it.
func TestKindsInstalledLater(t *testing.T) {
	c := StartCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.Kubectl(t, "", "create", "namespace", "shop")
	if _, err := c.Client.CoreV1().Services("shop").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gw, err := gatewayclient.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ic, err := istioclient.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var warnings atomic.Int64
	cp := xds.NewServer(xds.Options{RecheckKinds: 200 * time.Millisecond,
		Logger: slog.New(countWarnings{slog.NewTextHandler(io.Discard, nil), &warnings})})
	done := make(chan error, 2)
	go func() { done <- cp.Run(ctx) }()
	go func() { done <- xds.RunAllInformers(ctx, xds.Clients{Kube: c.Client, Gateway: gw, Istio: ic}, cp, 0) }()
	defer func() {
		cancel()
		<-done
		<-done
	}()
	// Four kinds not served: HTTPRoutes, GRPCRoutes, PeerAuthentications,
	// AuthorizationPolicies.
	waitFor(t, "the four missing kinds logged", 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		return warnings.Load() == 4, fmt.Sprint(warnings.Load(), " warnings")
	})

	start := time.Now()
	c.Kubectl(t, "", "apply", "--server-side", "-f", chartPath(t)+"/crds/")
	c.Kubectl(t, "", "wait", "--for=condition=Established", "--timeout=60s", "crd/authorizationpolicies.security.istio.io",
		"crd/peerauthentications.security.istio.io", "crd/httproutes.gateway.networking.k8s.io", "crd/grpcroutes.gateway.networking.k8s.io")
	c.Kubectl(t, `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-nothing, namespace: shop}
spec: {}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: strict, namespace: shop}
spec: {mtls: {mode: STRICT}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: echo, port: 80}]
  rules: [{backendRefs: [{name: echo, port: 80}]}]
`, "apply", "-f", "-")
	waitFor(t, "the policies' and the route's status", 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		ap, err1 := ic.SecurityV1().AuthorizationPolicies("shop").Get(ctx, "allow-nothing", metav1.GetOptions{})
		pa, err2 := ic.SecurityV1().PeerAuthentications("shop").Get(ctx, "strict", metav1.GetOptions{})
		r, err3 := gw.GatewayV1().HTTPRoutes("shop").Get(ctx, "r", metav1.GetOptions{})
		if err1 != nil || err2 != nil || err3 != nil {
			return false, fmt.Sprint(err1, err2, err3)
		}
		policyOK := func(types []string) bool {
			for _, ty := range types {
				if ty == xds.PolicyConditionType {
					return true
				}
			}
			return false
		}
		var apTypes, paTypes []string
		for _, cond := range ap.Status.GetConditions() {
			apTypes = append(apTypes, cond.GetType())
		}
		for _, cond := range pa.Status.GetConditions() {
			paTypes = append(paTypes, cond.GetType())
		}
		routeOK := false
		for _, p := range r.Status.Parents {
			for _, cond := range p.Conditions {
				routeOK = routeOK || p.ControllerName == xds.MeshControllerName && cond.Type == string(gatewayv1.RouteConditionAccepted) && cond.Status == metav1.ConditionTrue
			}
		}
		return policyOK(apTypes) && policyOK(paTypes) && routeOK, fmt.Sprintf("AuthorizationPolicy %v, PeerAuthentication %v, HTTPRoute %+v", apTypes, paTypes, r.Status.Parents)
	})
	t.Logf("CRDs applied after the control plane started: the policies' and the route's status written %.1f s later, without a restart", time.Since(start).Seconds())
}
