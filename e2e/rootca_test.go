//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshlet-dev/meshlet/deploy"
	"github.com/meshlet-dev/meshlet/injector"
	"github.com/meshlet-dev/meshlet/webhook"
)

// apiTraffic records the requests one client sends to the API server,
// at its transport: watches apart, everything else (lists, gets, writes)
// by method and URL. It observes real traffic; it answers nothing.
type apiTraffic struct {
	mu      sync.Mutex
	watches int
	other   []string
}

func (a *apiTraffic) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		a.mu.Lock()
		if w := r.URL.Query().Get("watch"); w == "true" || w == "1" {
			a.watches++
		} else {
			a.other = append(a.other, r.Method+" "+r.URL.RequestURI())
		}
		a.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// since returns the non-watch requests after the first n.
func (a *apiTraffic) since(n int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.other[n:]...)
}

func (a *apiTraffic) watchCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.watches
}

func (a *apiTraffic) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.other)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// rootCASyncs reads meshlet_injector_root_ca_syncs_total of kind from an
// injector's metrics, by result.
func rootCASyncs(t *testing.T, s *injector.Server, kind string) map[string]int {
	t.Helper()
	resp, err := http.Get("http://" + s.Addrs()["monitoring"] + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	out := map[string]int{}
	prefix := fmt.Sprintf(`meshlet_injector_root_ca_syncs_total{kind=%q,result="`, kind)
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		result, value, _ := strings.Cut(rest, `"} `)
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
		out[result] = int(n)
	}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestInjectorRootCASync: the injector's root-CA controller against a real
// API server, with two replicas (deploy/'s RBAC, the same CA): a new
// namespace gets its root-CA ConfigMap, and a deleted or edited ConfigMap
// and a changed caBundle are repaired from the watch events. In steady
// state, across several informer resyncs that each re-check every
// namespace (seen in the sync counter), neither replica sends the API
// server anything but its watches: no LIST of namespaces, no GET of
// ConfigMaps, and no write (the replicas do not fight); where they raced,
// their writes conflicted and were requeued, never failed.
func TestInjectorRootCASync(t *testing.T) {
	c := StartCluster(t)
	ctx := context.Background()
	c.Kubectl(t, string(deploy.Manifest), "apply", "-f", "-")
	const resync = 300 * time.Millisecond
	var traffic [2]apiTraffic
	var replicas [2]*injector.Server
	for i := range replicas {
		s, stop := startInjectorWrapped(t, c, traffic[i].wrap, func(o *injector.Options) { o.Resync = resync })
		t.Cleanup(stop)
		replicas[i] = s
	}
	root := string(replicas[0].RootPEM())
	if string(replicas[1].RootPEM()) != root {
		t.Fatal("the replicas have different CAs")
	}
	cms := func(ns string) (*corev1.ConfigMap, string) {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, webhook.DefaultRootCACM, metaGet)
		if err != nil {
			return nil, err.Error()
		}
		if cm.Data["root-cert.pem"] != root {
			return nil, fmt.Sprintf("root-cert.pem is %.40q", cm.Data["root-cert.pem"])
		}
		return cm, ""
	}
	waitCM := func(what, ns string, extra func(*corev1.ConfigMap) bool) *corev1.ConfigMap {
		t.Helper()
		var got *corev1.ConfigMap
		waitFor(t, what, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
			cm, state := cms(ns)
			if cm == nil || (extra != nil && !extra(cm)) {
				return false, state
			}
			got = cm
			return true, ""
		})
		return got
	}
	caBundled := func() (bool, string) {
		mwc, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshlet-injector", metaGet)
		if err != nil {
			return false, err.Error()
		}
		for _, w := range mwc.Webhooks {
			if string(w.ClientConfig.CABundle) != root {
				return false, fmt.Sprintf("webhook %s caBundle %.40q", w.Name, w.ClientConfig.CABundle)
			}
		}
		return true, ""
	}
	waitFor(t, "the caBundle patched", 30*time.Second, 50*time.Millisecond, caBundled)
	waitCM("the root CA in the existing namespace default", "default", nil)

	// A new labelled namespace gets its ConfigMap.
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop",
		Labels: map[string]string{webhook.NamespaceLabel: "enabled"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := waitCM("the root CA published in the new namespace shop", "shop", nil)

	// Deleted: recreated (a new object).
	if err := c.Client.CoreV1().ConfigMaps("shop").Delete(ctx, webhook.DefaultRootCACM, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCM("the deleted ConfigMap recreated", "shop", func(cm *corev1.ConfigMap) bool { return cm.UID != first.UID })

	// Edited: its key restored, another key kept.
	edited, _ := cms("shop")
	edited = edited.DeepCopy()
	edited.Data["root-cert.pem"] = "tampered"
	edited.Data["note"] = "kept"
	if _, err := c.Client.CoreV1().ConfigMaps("shop").Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCM("the edited ConfigMap repaired", "shop", func(cm *corev1.ConfigMap) bool { return cm.Data["note"] == "kept" })

	// The caBundle changed (to another CA): patched back.
	patch := fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":%q}]`, base64.StdEncoding.EncodeToString(c.CAPEM()))
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, "meshlet-injector",
		types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the changed caBundle repaired", 30*time.Second, 50*time.Millisecond, caBundled)

	// Steady state. Each resync queues every namespace and the webhook
	// configuration again; waiting for three more caBundle syncs on each
	// replica spans at least two full resync rounds.
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRounds := func(s *injector.Server, rounds int) {
		t.Helper()
		start := total(rootCASyncs(t, s, "cabundle"))
		waitFor(t, fmt.Sprintf("%d resync rounds", rounds), 30*time.Second, 50*time.Millisecond, func() (bool, string) {
			n := total(rootCASyncs(t, s, "cabundle"))
			return n-start >= rounds, fmt.Sprintf("%d caBundle syncs", n-start)
		})
	}
	// Let the repairs' follow-ups (the other replica's conflicts) settle.
	for _, s := range replicas {
		waitRounds(s, 2)
	}
	var before [2]int
	var nsSyncs [2]int
	for i, s := range replicas {
		before[i] = traffic[i].count()
		nsSyncs[i] = total(rootCASyncs(t, s, "namespace"))
	}
	for _, s := range replicas {
		waitRounds(s, 3)
	}
	for i, s := range replicas {
		synced := total(rootCASyncs(t, s, "namespace")) - nsSyncs[i]
		t.Logf("replica %d: %d namespace syncs over %d namespaces, %d watches opened in all; syncs by result: namespace %v, cabundle %v",
			i, synced, len(nss.Items), traffic[i].watchCount(), rootCASyncs(t, s, "namespace"), rootCASyncs(t, s, "cabundle"))
		if synced < 2*len(nss.Items) {
			t.Errorf("replica %d: %d namespace syncs in two resync rounds, want at least %d (every namespace, twice)", i, synced, 2*len(nss.Items))
		}
		// Racing replicas see conflicts, which are requeued, not errors.
		for _, kind := range []string{"namespace", "cabundle"} {
			if n := rootCASyncs(t, s, kind)["error"]; n > 0 {
				t.Errorf("replica %d: %d %s syncs failed", i, n, kind)
			}
		}
		if reqs := traffic[i].since(before[i]); len(reqs) > 0 {
			t.Errorf("replica %d: in steady state it sent %d requests besides its watches:\n%s", i, len(reqs), strings.Join(reqs, "\n"))
		}
	}
}
