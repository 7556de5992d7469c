//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshlet-dev/meshlet/e2e/clustersuite"
	"github.com/meshlet-dev/meshlet/internal/images"
)

// TestCluster runs the cluster suite (e2e/clustersuite: injection, mTLS
// through the redirect, the Prometheus scrape, zone failover, STRICT
// refusal, a Job) against a cluster of yours where meshlet is installed:
// make e2e-cluster KUBECONFIG=FILE sets MESHLET_E2E_KUBECONFIG. The test
// app comes from MESHLET_E2E_APP_IMAGE, or is built and pushed to
// MESHLET_E2E_REGISTRY (host/path, with your docker credentials).
// MESHLET_E2E_PROMETHEUS names a Prometheus that discovers pods by their
// prometheus.io annotations. TestRealNodesMesh runs the same suite on the
// nodes it builds.
func TestCluster(t *testing.T) {
	kubeconfig := os.Getenv("MESHLET_E2E_KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("no cluster named: make e2e-cluster KUBECONFIG=FILE runs this against yours (TestRealNodesMesh runs the same suite on the nodes it builds)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("MESHLET_E2E_KUBECONFIG %s: %v", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	app := os.Getenv("MESHLET_E2E_APP_IMAGE")
	if reg := os.Getenv("MESHLET_E2E_REGISTRY"); app == "" && reg != "" {
		app = pushApp(t, reg)
	}
	if app == "" {
		t.Fatal("the test app's image: set MESHLET_E2E_APP_IMAGE to an image your nodes can pull, or MESHLET_E2E_REGISTRY=host/path to build and push it there (make e2e-cluster APP_IMAGE=... or REGISTRY=...)")
	}
	clustersuite.Run(t, clustersuite.Target{Client: client, AppImage: app, TrustDomain: os.Getenv("MESHLET_E2E_TRUST_DOMAIN"),
		Prometheus: os.Getenv("MESHLET_E2E_PROMETHEUS")})
}

// pushApp builds the test app (e2e/images/echo) for images.Platforms, as
// make images builds meshlet's, pushes it to reg/meshlet-e2e-app:e2e with
// the default keychain, and returns its digest reference.
func pushApp(t *testing.T, reg string) string {
	t.Helper()
	root, _ := filepath.Abs("..")
	ctx := context.Background()
	meta := images.Meta{Version: "e2e", Source: "https://github.com/meshlet-dev/meshlet", Created: time.Unix(0, 0).UTC()}
	built, err := images.Build(ctx, images.Options{Root: root, Platforms: images.Platforms, PGO: "off", Meta: meta, WorkDir: t.TempDir()}, images.E2EApp)
	if err != nil {
		t.Fatalf("build the test app: %v", err)
	}
	tag, err := name.NewTag(strings.TrimSuffix(reg, "/") + "/" + images.E2EApp.Name + ":e2e")
	if err != nil {
		t.Fatalf("MESHLET_E2E_REGISTRY %q: %v", reg, err)
	}
	d, err := images.Push(ctx, built[0], tag, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		t.Fatalf("push the test app: %v", err)
	}
	ref := tag.Context().Digest(d.String()).String()
	t.Logf("test app pushed: %s", ref)
	return ref
}

// podPrometheus runs Debian's Prometheus with the usual pod discovery: the
// pods' targets kept to those annotated prometheus.io/scrape "true",
// scraped at their prometheus.io port and path, by the relabelling of the
// kubernetes-pods job of Prometheus's example configuration. Debian builds
// Prometheus without Kubernetes discovery, so a stand-in serves the pods
// the API server lists, with kubernetes_sd's role-pod meta labels, over
// http_sd; the relabelling is Prometheus's. It returns the base URL.
func podPrometheus(t *testing.T, c *Cluster) string {
	t.Helper()
	sd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pods, err := c.Client.CoreV1().Pods("").List(r.Context(), metav1.ListOptions{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		groups := []map[string]any{}
		for _, p := range pods.Items {
			if p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
				continue
			}
			labels := map[string]string{"__meta_kubernetes_namespace": p.Namespace, "__meta_kubernetes_pod_name": p.Name}
			for k, v := range p.Annotations {
				labels["__meta_kubernetes_pod_annotation_"+promName(k)] = v
			}
			groups = append(groups, map[string]any{"targets": []string{p.Status.PodIP}, "labels": labels})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(groups)
	}))
	t.Cleanup(sd.Close)
	addr, p := startPrometheus(t, "prometheus-pods", fmt.Sprintf(`global: {scrape_interval: 1s}
scrape_configs:
  - job_name: kubernetes-pods
    http_sd_configs: [{url: %q, refresh_interval: 1s}]
    relabel_configs:
      - {source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape], action: keep, regex: "true"}
      - {source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path], action: replace, target_label: __metrics_path__, regex: (.+)}
      - {source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port], action: replace, regex: '([^:]+)(?::\d+)?;(\d+)',
         replacement: '$1:$2', target_label: __address__}
      - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
      - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
`, sd.URL))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus (pod discovery) not ready:\n%s", tail(p.out.String(), 2000))
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Prometheus (pod discovery) targets:\n%s", promTargets(addr))
		}
	})
	return "http://" + addr
}

// promName is a Kubernetes name as a Prometheus label name: every
// character but letters, digits and _ becomes _, as kubernetes_sd does.
func promName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// promTargets is Prometheus's active targets with their health, for a
// failure's log.
func promTargets(addr string) string {
	resp, err := http.Get("http://" + addr + "/api/v1/targets")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Active []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return err.Error()
	}
	var out []string
	for _, a := range r.Data.Active {
		out = append(out, fmt.Sprintf("%s %s %s", a.ScrapeURL, a.Health, a.LastError))
	}
	return strings.Join(out, "\n")
}

// TestRealNodesHold builds the real-node cluster of TestRealNodesMesh
// (three nodes in zones a, b and c, the chart installed with helm) and
// holds it for other commands until the file MESHLET_E2E_HOLD names is
// removed, or a minute before the test's deadline (go test -timeout 70m:
// the default 10 minutes would end the hold soon): it writes there, as
// shell assignments, the cluster's KUBECONFIG and the test app's
// APP_IMAGE, so that
//
//	make e2e-cluster $(cat FILE)
//
// runs the cluster suite from another process against a cluster it did
// not build, as against yours (docs/testing.md). Not part of make test: a
// developer's tool.
func TestRealNodesHold(t *testing.T) {
	hold := os.Getenv("MESHLET_E2E_HOLD")
	if hold == "" {
		t.Skip("MESHLET_E2E_HOLD=FILE holds a real-node cluster for make e2e-cluster; not part of make test")
	}
	c := StartClusterWith(t, ClusterOptions{Nodes: true})
	c.StartNodes(t, "zone-a", "zone-b", "zone-c")
	startInjectorPod(t, c)
	if err := os.WriteFile(hold, []byte(fmt.Sprintf("KUBECONFIG=%s APP_IMAGE=%s\n", c.Kubeconfig, c.Images.Echo)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster held: run make e2e-cluster $(cat %s); rm %s ends the hold", hold, hold)
	deadline, ok := t.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Hour)
	}
	// A minute is left for the nodes' teardown, which a timeout's panic
	// would skip.
	for deadline = deadline.Add(-time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if _, err := os.Stat(hold); err != nil {
			return
		}
	}
	os.Remove(hold)
	t.Log("the test's deadline is near: ending the hold")
}
