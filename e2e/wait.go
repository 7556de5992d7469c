//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Waiting on conditions, not on proxies of them: a Service is used once
// it routes, a create that goes through the webhook is retried while the
// webhook cannot be reached, and a failed real-node test prints what the
// cluster knows.

// waitFor polls cond every interval until it reports done, failing the
// test after within with what and the last state cond described.
func waitFor(t *testing.T, what string, within, interval time.Duration, cond func() (done bool, state string)) {
	t.Helper()
	var state string
	for deadline := time.Now().Add(within); ; time.Sleep(interval) {
		var done bool
		if done, state = cond(); done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %s", what, within, state)
		}
	}
}

// inServiceRange says whether ip is a ClusterIP of the test cluster: the
// host routes that range onto a port-less bridge, so a connection that
// kube-proxy does not translate goes nowhere, never off the machine.
func inServiceRange(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && netip.MustParsePrefix(serviceRange).Contains(a)
}

// waitServiceRoutes waits until the Service ns/name routes port: one of
// its EndpointSlices has a ready endpoint and a connection from the host
// to its ClusterIP and port succeeds (kube-proxy has written the rule; it
// refuses connections to a Service without endpoints). With roots, the
// connection must also complete a TLS handshake for the Service's DNS
// name against them (the webhook's serving certificate is in place).
func (c *Cluster) waitServiceRoutes(t *testing.T, ns, name string, port int32, roots *x509.CertPool, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	waitFor(t, fmt.Sprintf("Service %s/%s routing port %d", ns, name, port), within, 200*time.Millisecond, func() (bool, string) {
		svc, err := c.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ip := svc.Spec.ClusterIP
		if !inServiceRange(ip) {
			t.Fatalf("Service %s/%s has ClusterIP %q outside the test's Service range %s: refusing to dial it", ns, name, ip, serviceRange)
		}
		if n := readyEndpoints(c, ns, name); n == 0 {
			return false, "no ready endpoint in its EndpointSlices\n" + c.serviceDiagnostics(ns, name)
		}
		addr := net.JoinHostPort(ip, fmt.Sprint(port))
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, fmt.Sprintf("dial %s: %v\n%s", addr, err, c.serviceDiagnostics(ns, name))
		}
		defer conn.Close()
		if roots != nil {
			conn.SetDeadline(time.Now().Add(2 * time.Second))
			tc := tls.Client(conn, &tls.Config{RootCAs: roots, ServerName: name + "." + ns + ".svc"})
			if err := tc.Handshake(); err != nil {
				return false, fmt.Sprintf("TLS handshake with %s: %v", addr, err)
			}
		}
		return true, ""
	})
	t.Logf("Service %s/%s routes port %d (%.1f s)", ns, name, port, time.Since(start).Seconds())
}

// readyEndpoints counts the ready endpoints of the Service ns/name.
func readyEndpoints(c *Cluster, ns, name string) int {
	slices, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return 0
	}
	n := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n++
			}
		}
	}
	return n
}

// webhookUnreachable says whether err is the API server failing to call
// an admission webhook (refused, no route, timed out): the webhook's
// Service does not route yet or any more, which a retry outlives.
func webhookUnreachable(err error) bool {
	return err != nil && apierrors.IsInternalError(err) && strings.Contains(err.Error(), "failed calling webhook")
}

// createThroughWebhook runs create, retrying for up to a minute while it
// fails because the API server could not call a webhook; any other error
// fails the test.
func createThroughWebhook(t *testing.T, what string, create func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if err = create(); err == nil {
			return
		}
		if !webhookUnreachable(err) {
			t.Fatalf("create %s: %v", what, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("create %s: the webhook stayed unreachable for a minute: %v", what, err)
		}
		t.Logf("create %s: %v; retrying", what, err)
	}
}

// serviceDiagnostics describes Service ns/name as the data path sees it:
// its ClusterIP and ports, its EndpointSlices' endpoints with their
// conditions, and kube-proxy's nftables rules that mention its ClusterIP.
func (c *Cluster) serviceDiagnostics(ns, name string) string {
	ctx := context.Background()
	var b strings.Builder
	svc, err := c.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("Service %s/%s: %v", ns, name, err)
	}
	fmt.Fprintf(&b, "Service %s/%s: ClusterIP %s ports %v\n", ns, name, svc.Spec.ClusterIP, svc.Spec.Ports)
	slices, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		fmt.Fprintf(&b, "  EndpointSlices: %v\n", err)
	}
	if slices != nil {
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				fmt.Fprintf(&b, "  endpoint %v ready=%v serving=%v terminating=%v target=%v\n", e.Addresses,
					deref(e.Conditions.Ready), deref(e.Conditions.Serving), deref(e.Conditions.Terminating), e.TargetRef)
			}
		}
	}
	if out, err := exec.Command("nft", "list", "table", "ip", "kube-proxy").CombinedOutput(); err != nil {
		fmt.Fprintf(&b, "  nft list table ip kube-proxy: %v %s\n", err, out)
	} else {
		for _, line := range strings.Split(string(out), "\n") {
			if svc.Spec.ClusterIP != "" && strings.Contains(line, svc.Spec.ClusterIP+" ") {
				fmt.Fprintf(&b, "  kube-proxy: %s\n", strings.TrimSpace(line))
			}
		}
	}
	return b.String()
}

func deref(p *bool) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// dumpOnFailure registers a cleanup that, if the test failed, logs what
// the cluster knows about namespaces: every pod's phase, conditions and
// container states, the namespaces' events, the injector's log tail,
// and for each Service its endpoints and kube-proxy's rules. It runs
// before the cluster is torn down (cleanups run last first).
func (c *Cluster) dumpOnFailure(t *testing.T, namespaces ...string) {
	t.Cleanup(func() {
		if t.Failed() {
			c.diagnostics(t, namespaces...)
		}
	})
}

// diagnostics logs what dumpOnFailure logs, now.
func (c *Cluster) diagnostics(t *testing.T, namespaces ...string) {
	ctx := context.Background()
	for _, ns := range namespaces {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("diagnostics: pods in %s: %v", ns, err)
			continue
		}
		for _, p := range pods.Items {
			t.Logf("diagnostics: pod %s/%s on %q: %s %s", ns, p.Name, p.Spec.NodeName, p.Status.Phase, podConditions(p))
			for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				t.Logf("diagnostics:   container %s ready=%v restarts=%d state=%+v last=%+v", s.Name, s.Ready, s.RestartCount, s.State, s.LastTerminationState)
			}
			if ns == "meshlet-system" {
				t.Logf("diagnostics: injector %s log (tail):\n%s", p.Name, tail(c.podLog(t, p, "injector"), 3000))
			}
		}
		if events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, e := range events.Items {
				t.Logf("diagnostics: event %s/%s %s %s: %s (x%d)", ns, e.InvolvedObject.Name, e.Type, e.Reason, e.Message, e.Count)
			}
		}
		if svcs, err := c.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, s := range svcs.Items {
				t.Logf("diagnostics: %s", c.serviceDiagnostics(ns, s.Name))
			}
		}
	}
}

func podConditions(p corev1.Pod) string {
	var parts []string
	for _, cond := range p.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s", cond.Type, cond.Status))
	}
	return strings.Join(parts, " ")
}
