//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshlet-dev/meshlet/webhook"
)

// fetch has the client pod's app send n GETs of target through its
// sidecar (the echo app's /fetch), with headers, and returns who answered
// each: the pod name of a 200, else "code N" or the error.
func fetch(t *testing.T, client corev1.Pod, target string, n int, headers ...string) []string {
	t.Helper()
	return fetchMethod(t, client, "GET", target, n, headers...)
}

// fetchMethod is fetch with another method than GET.
func fetchMethod(t *testing.T, client corev1.Pod, method, target string, n int, headers ...string) []string {
	t.Helper()
	q := url.Values{"url": {target}, "n": {fmt.Sprint(n)}, "header": headers, "method": {method}}
	var r struct {
		Results []peerResult `json:"results"`
	}
	b := httpGet(t, "http://"+client.Status.PodIP+":8080/fetch?"+q.Encode())
	if err := json.Unmarshal([]byte(b), &r); err != nil {
		t.Fatalf("client /fetch: %v: %s", err, b)
	}
	out := make([]string, 0, len(r.Results))
	for _, x := range r.Results {
		switch {
		case x.Error != "":
			out = append(out, "error "+x.Error)
		case x.Code == 200 && strings.HasPrefix(x.Body, "pod="):
			out = append(out, strings.TrimPrefix(strings.Fields(x.Body)[0], "pod="))
		default:
			out = append(out, fmt.Sprintf("code %d", x.Code))
		}
	}
	return out
}

// checkMeshRoutes applies a Gateway API HTTPRoute on the Service echo
// (GAMMA) in namespace shop, whose app pods answer with their names:
// requests with "x-canary: always" go to the Service secure, the others
// split 90/10 between echo and secure. It checks that the client's
// sidecar follows it, that the control plane wrote the route's status,
// and that deleting the route gives echo back its own traffic.
func checkMeshRoutes(t *testing.T, c *Cluster, client corev1.Pod, vip string) {
	t.Helper()
	const route = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: canary, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: echo, port: 80}]
  rules:
  - matches: [{headers: [{name: x-canary, value: always}]}]
    backendRefs: [{name: secure, port: 80}]
  - backendRefs: [{name: echo, port: 80, weight: 90}, {name: secure, port: 80, weight: 10}]
`
	c.Kubectl(t, route, "apply", "-f", "-")
	target := "http://" + vip + "/"
	t0 := time.Now()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		got := fetch(t, client, target, 5, "x-canary: always")
		if strings.Join(got, ",") == "secure-0,secure-0,secure-0,secure-0,secure-0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the header match never reached the client's sidecar: answered by %v\nroute: %s\nclient sidecar:\n%s", got,
				c.Kubectl(t, "", "get", "-n", "shop", "httproute", "canary", "-o", "yaml"), tail(c.podLog(t, client, webhook.ProxyContainer), 3000))
		}
	}
	t.Logf("HTTPRoute shop/canary: requests with x-canary: always answered by secure-0 %.1f s after the apply", time.Since(t0).Seconds())

	const n = 300
	counts := map[string]int{}
	for _, who := range fetch(t, client, target, n) {
		switch {
		case who == "secure-0":
			counts["secure"]++
		case strings.HasPrefix(who, "echo-"):
			counts["echo"]++
		default:
			counts[who]++
		}
	}
	// Binomial, 4 standard deviations.
	mean, sd := n*0.1, 4*math.Sqrt(n*0.1*0.9)
	if counts["echo"]+counts["secure"] != n || float64(counts["secure"]) < mean-sd || float64(counts["secure"]) > mean+sd {
		t.Errorf("90/10 split: %v of %d requests, want secure %v ± %.0f and nothing else", counts, n, mean, sd)
	} else {
		t.Logf("90/10 split: %v of %d requests", counts, n)
	}

	// The route's status, written by meshlet's controller.
	var status struct {
		Parents []struct {
			ControllerName string `json:"controllerName"`
			ParentRef      struct {
				Kind, Name string
			} `json:"parentRef"`
			Conditions []struct {
				Type, Status, Reason string
				ObservedGeneration   int64 `json:"observedGeneration"`
			} `json:"conditions"`
		} `json:"parents"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		out := c.Kubectl(t, "", "get", "-n", "shop", "httproute", "canary", "-o", "jsonpath={.status}")
		_ = json.Unmarshal([]byte(out), &status)
		conds := map[string]string{}
		for _, p := range status.Parents {
			if p.ControllerName == "meshlet.io/mesh" && p.ParentRef.Kind == "Service" && p.ParentRef.Name == "echo" {
				for _, cond := range p.Conditions {
					conds[cond.Type] = cond.Status + "/" + cond.Reason
				}
			}
		}
		if conds["Accepted"] == "True/Accepted" && conds["ResolvedRefs"] == "True/ResolvedRefs" {
			t.Logf("HTTPRoute shop/canary status: %v", conds)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("HTTPRoute shop/canary status: %s", out)
		}
	}

	c.Kubectl(t, "", "delete", "-n", "shop", "httproute", "canary")
	t1 := time.Now()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		got := fetch(t, client, target, 20, "x-canary: always")
		echo := 0
		for _, who := range got {
			if strings.HasPrefix(who, "echo-") {
				echo++
			}
		}
		if echo == len(got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after deleting the route: answered by %v", got)
		}
	}
	t.Logf("route deleted: echo answers all its requests again within %.1f s", time.Since(t1).Seconds())
}
