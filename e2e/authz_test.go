//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshlet-dev/meshlet/webhook"
)

// checkAuthorization applies Istio's security policies, unchanged YAML,
// to a server in namespace vault and calls it from two identities in
// shop: caller and intruder. A STRICT PeerAuthentication for vault
// refuses a plaintext client (this test process, outside the mesh); an
// AuthorizationPolicy allowing only caller's service account GET
// /public/* lets it through and denies its POST and the intruder (403,
// RBAC in the server sidecar's access log); a DENY policy wins over the
// ALLOW; the policies' status says they are applied; deleting them
// restores access.
func checkAuthorization(t *testing.T, c *Cluster, app func(env ...corev1.EnvVar) corev1.Container, grace int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vault",
		Labels: map[string]string{webhook.NamespaceLabel: "enabled"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitDefaultSA(t, "vault")
	svc, err := c.Client.CoreV1().Services("vault").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "guarded"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createThroughWebhook(t, "pod vault/guarded-0", func() error {
		_, err := c.Client.CoreV1().Pods("vault").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "guarded-0",
			Labels: map[string]string{"app": "guarded"}},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, NodeName: "node-c", Containers: []corev1.Container{app()}}}, metav1.CreateOptions{})
		return err
	})
	callers := map[string]corev1.Pod{}
	for _, sa := range []string{"caller", "intruder"} {
		if _, err := c.Client.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createThroughWebhook(t, "pod shop/"+sa, func() error {
			_, err := c.Client.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sa, Labels: map[string]string{"app": sa}},
				Spec: corev1.PodSpec{ServiceAccountName: sa, TerminationGracePeriodSeconds: &grace, NodeName: "node-b",
					Containers: []corev1.Container{app()}}}, metav1.CreateOptions{})
			return err
		})
	}
	guarded := waitPodReady(t, c, "vault", "guarded-0", 90*time.Second)
	for _, sa := range []string{"caller", "intruder"} {
		callers[sa] = *waitPodReady(t, c, "shop", sa, 90*time.Second)
	}
	target := "http://" + svc.Spec.ClusterIP
	plaintext := func() (int, error) {
		resp, err := (&http.Client{Timeout: 3 * time.Second}).Get("http://" + guarded.Status.PodIP + ":8080/public/x")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// expect polls until a request from who answers want ("guarded-0" for
	// a 200 from the app, else "code N"): policies take a push to arrive.
	expect := func(what, who, method, path, want string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			got := fetchMethod(t, callers[who], method, target+path, 1)
			if len(got) == 1 && got[0] == want {
				t.Logf("%s: %s %s %s from %s answered %s", what, method, target, path, who, want)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s %s from %s answered %v, want %s\nserver sidecar:\n%s", what, method, path, who, got, want,
					tail(c.podLog(t, *guarded, webhook.ProxyContainer), 3000))
			}
		}
	}
	if code, err := plaintext(); err != nil || code != 200 {
		t.Fatalf("before any policy, plaintext from outside the mesh: %d %v", code, err)
	}
	expect("no policy", "intruder", "POST", "/anything", "guarded-0")

	c.Kubectl(t, `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: vault}
spec:
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-caller, namespace: vault}
spec:
  selector: {matchLabels: {app: guarded}}
  action: ALLOW
  rules:
  - from: [{source: {principals: ["cluster.local/ns/shop/sa/caller"]}}]
    to: [{operation: {methods: ["GET"], paths: ["/public/*"]}}]
`, "apply", "-f", "-")
	t0 := time.Now()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		code, err := plaintext()
		if err != nil || code != 200 {
			t.Logf("STRICT PeerAuthentication for vault: plaintext from outside the mesh refused within %.1f s (%d %v)", time.Since(t0).Seconds(), code, err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("STRICT PeerAuthentication: plaintext still answered %d after 60 s", code)
		}
	}
	expect("ALLOW caller GET /public/*", "caller", "GET", "/public/x", "guarded-0")
	expect("ALLOW caller GET /public/*: POST", "caller", "POST", "/public/x", "code 403")
	expect("ALLOW caller GET /public/*: another identity", "intruder", "GET", "/public/x", "code 403")
	// The access log is flushed on an interval: poll for the line.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		log := c.podLog(t, *guarded, webhook.ProxyContainer)
		line := ""
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, `"GET /public/x`) && strings.Contains(l, " 403 ") &&
				strings.Contains(l, "rbac_access_denied_matched_policy[none]") && strings.Contains(l, "spiffe://cluster.local/ns/shop/sa/intruder") {
				line = l
			}
		}
		if line != "" {
			t.Logf("the server sidecar's access log: %s", line)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access-log line of the intruder's denied GET:\n%s", tail(log, 3000))
		}
	}

	c.Kubectl(t, `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-secret, namespace: vault}
spec:
  action: DENY
  rules:
  - to: [{operation: {paths: ["/public/secret"]}}]
`, "apply", "-f", "-")
	expect("DENY wins over ALLOW", "caller", "GET", "/public/secret", "code 403")
	expect("DENY leaves the rest", "caller", "GET", "/public/x", "guarded-0")
	m := httpGet(t, "http://"+guarded.Status.PodIP+":15090/stats/prometheus")
	for _, want := range []string{
		`meshlet_authz_decisions_total{action="DENY",policy="ns[vault]-policy[deny-secret]-rule[0]",result="denied"}`,
		`meshlet_authz_decisions_total{action="ALLOW",policy="none",result="denied"}`,
		`meshlet_authz_decisions_total{action="ALLOW",policy="ns[vault]-policy[allow-caller]-rule[0]",result="allowed"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("the server sidecar's metrics lack %s", want)
		}
	}

	// Every policy's status says meshlet applies it.
	for _, p := range []string{"peerauthentication/default", "authorizationpolicy/allow-caller", "authorizationpolicy/deny-secret"} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			st := c.Kubectl(t, "", "get", "-n", "vault", p, "-o", `jsonpath={.status.conditions[?(@.type=="MeshletAccepted")].status} {.status.conditions[?(@.type=="MeshletAccepted")].reason}`)
			if strings.TrimSpace(st) == "True Accepted" {
				t.Logf("%s: MeshletAccepted True Accepted", p)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s status: %q\n%s", p, st, c.Kubectl(t, "", "get", "-n", "vault", p, "-o", "yaml"))
			}
		}
	}

	c.Kubectl(t, "", "delete", "-n", "vault", "peerauthentication/default", "authorizationpolicy/allow-caller", "authorizationpolicy/deny-secret")
	expect("policies deleted", "intruder", "POST", "/public/secret", "guarded-0")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if code, err := plaintext(); err == nil && code == 200 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("policies deleted: plaintext still refused: %d %v", code, err)
		}
	}
	t.Logf("policies deleted: every identity and plaintext answered again")

	// DISABLE on the server's port: the caller's sidecar dials it in
	// plaintext (the control plane takes the endpoint's meshed marker
	// away), which the server's sidecar counts as such.
	requests := func(policy string) float64 {
		var n float64
		for _, line := range strings.Split(httpGet(t, "http://"+guarded.Status.PodIP+":15090/stats/prometheus"), "\n") {
			if strings.HasPrefix(line, "istio_requests_total{") && strings.Contains(line, `reporter="destination"`) &&
				strings.Contains(line, `connection_security_policy="`+policy+`"`) {
				var v float64
				fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
				n += v
			}
		}
		return n
	}
	c.Kubectl(t, `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: plain-port, namespace: vault}
spec:
  selector: {matchLabels: {app: guarded}}
  portLevelMtls: {8080: {mode: DISABLE}}
`, "apply", "-f", "-")
	t0 = time.Now()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		mtlsBefore, plainBefore := requests("mutual_tls"), requests("none")
		got := fetchMethod(t, callers["caller"], "GET", target+"/public/x", 1)
		if len(got) == 1 && got[0] == "guarded-0" && requests("none") > plainBefore && requests("mutual_tls") == mtlsBefore {
			t.Logf("PeerAuthentication DISABLE on port 8080: the caller's request reached guarded-0 in plaintext %.1f s after the apply", time.Since(t0).Seconds())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DISABLE: the caller's requests still arrive over mTLS (answered %v)", got)
		}
	}
	c.Kubectl(t, "", "delete", "-n", "vault", "peerauthentication/plain-port")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		mtlsBefore := requests("mutual_tls")
		got := fetchMethod(t, callers["caller"], "GET", target+"/public/x", 1)
		if len(got) == 1 && got[0] == "guarded-0" && requests("mutual_tls") > mtlsBefore {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DISABLE deleted: the caller's requests still arrive in plaintext (answered %v)", got)
		}
	}
	t.Logf("DISABLE deleted: the caller's requests arrive over mTLS again")
}
