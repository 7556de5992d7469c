//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/apis/v1alpha2"
	"sigs.k8s.io/gateway-api/apis/v1alpha3"
	xv1alpha1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	"sigs.k8s.io/gateway-api/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	conformanceconfig "sigs.k8s.io/gateway-api/conformance/utils/config"
	"sigs.k8s.io/gateway-api/conformance/utils/flags"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"

	"github.com/meshlet-dev/meshlet/internal/images"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/webhook"
)

// conformanceFeatures are the Gateway API features meshlet claims to the
// conformance suite, besides the MESH-HTTP profile's core (Mesh and
// HTTPRoute, which the profile adds itself): the suite runs every test
// whose features are all claimed and skips the others as unsupported. A
// feature stays here only while its tests pass.
var conformanceFeatures = []features.FeatureName{
	features.SupportMesh,
	features.SupportHTTPRoute,
	features.SupportMeshClusterIPMatching,
	features.SupportHTTPRouteResponseHeaderModification,
	features.SupportHTTPRouteParentRefPort,
	features.SupportMeshHTTPRouteNamedRouteRule,
	features.SupportMeshHTTPRouteQueryParamMatching,
	features.SupportMeshHTTPRouteRedirectPath,
	features.SupportMeshHTTPRouteRedirectPort,
	features.SupportMeshHTTPRouteSchemeRedirect,
	features.SupportMeshHTTPRouteBackendRequestHeaderModification,
	features.SupportMeshHTTPRouteRewritePath,
	features.SupportMeshConsumerRoute,
	features.SupportHTTPRoute303RedirectStatusCode,
	features.SupportHTTPRoute307RedirectStatusCode,
	features.SupportHTTPRoute308RedirectStatusCode,
	features.SupportGRPCRoute,
}

// conformanceReportEnv names the file the suite's report is written to
// (relative to the repository's root, or absolute): make conformance
// writes docs/conformance/gateway-api-v1.6.3-mesh.yaml. Unset, the
// report goes to a temporary folder; the suite logs it either way.
const conformanceReportEnv = "MESHLET_CONFORMANCE_REPORT"

// TestGatewayAPIConformance runs Gateway API's own conformance suite
// (sigs.k8s.io/gateway-api/conformance at the version go.mod requires,
// profile MESH-HTTP, the features of conformanceFeatures) against meshlet
// as users install it, on three real nodes: the chart installed with helm
// (the Gateway API CRDs from its crds/), the suite's namespaces labelled
// for injection, so that every echo pod it deploys runs the sidecar. The
// suite's echo-advanced image is built here from Istio's echo app, as
// upstream builds it, and the nodes pull it under the manifests' own name
// from the suite's registry (mirroredRegistries). Each of the suite's
// tests is a subtest and fails this test; the suite's report goes where
// MESHLET_CONFORMANCE_REPORT says. `go test ... -args -run-test=NAME`
// (and the suite's other flags) narrows the run.
func TestGatewayAPIConformance(t *testing.T) {
	c := StartClusterWith(t, ClusterOptions{Nodes: true})
	start := time.Now()
	nodes := c.StartNodes(t, "zone-a", "zone-b", "zone-c")
	t.Logf("%d nodes Ready in %.1f s", len(nodes), time.Since(start).Seconds())

	built := time.Now()
	echoRef := suiteEchoImage(t)
	server, client := testtool.IstioEcho(t)
	idx, err := images.EchoAdvanced(images.Meta{Version: testtool.IstioEchoVersion, Source: "https://github.com/istio/istio", Created: time.Unix(0, 0).UTC()},
		v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, server, client)
	if err != nil {
		t.Fatalf("the conformance suite's echo image: %v", err)
	}
	echoPushed := c.registry.pushMirrored(t, idx, echoRef)
	t.Logf("%s: Istio's echo %s, built and pushed to the suite's registry in %.1f s (%s)", echoRef, testtool.IstioEchoVersion, time.Since(built).Seconds(), echoPushed.DigestStr())

	c.dumpOnFailure(t, "meshlet-system")
	installControlPlane(t, c, 1)
	// The chart's crds/ (helm installs them before the release).
	c.Kubectl(t, "", "wait", "--for=condition=Established", "--timeout=60s",
		"crd/httproutes.gateway.networking.k8s.io", "crd/grpcroutes.gateway.networking.k8s.io", "crd/referencegrants.gateway.networking.k8s.io")

	opts := c.conformanceOptions(t)
	// Before the suite's cleanups (which delete its namespaces): the
	// state of its pods and their sidecars' logs when anything failed.
	defer func() {
		if t.Failed() {
			c.diagnostics(t, suite.MeshNamespace, suite.MeshConsumerNamespace)
			c.sidecarLogs(t, "", nil, 200, suite.MeshNamespace, suite.MeshConsumerNamespace)
		}
	}()
	results := &conformanceResults{last: time.Now()}
	opts.Hook = func(st *testing.T, test suite.ConformanceTest, _ *suite.ConformanceTestSuite) {
		since := results.record(st, test)
		if st.Failed() {
			// Every echo pod's: the clients (echo-v1 of either namespace)
			// and the servers, since the test started.
			c.sidecarLogs(st, "app=echo", &since, 100, suite.MeshNamespace, suite.MeshConsumerNamespace)
		}
	}
	ran := time.Now()
	conformance.RunConformanceWithOptions(t, opts)
	t.Logf("conformance suite: %.1f s (setup and tests)\n%s", time.Since(ran).Seconds(), results.summary())
	c.checkSuitePulls(t, echoRef, echoPushed)
}

// suiteEchoImage is the image the conformance suite's mesh manifests run
// (registry.k8s.io/gateway-api/echo-advanced:TAG): read from the suite
// itself, so that a new suite's tag is built and mirrored too.
func suiteEchoImage(t *testing.T) name.Tag {
	t.Helper()
	const manifests = "mesh/manifests.yaml"
	b, err := conformance.Manifests.ReadFile(manifests)
	if err != nil {
		t.Fatalf("the conformance suite's %s: %v", manifests, err)
	}
	refs := map[string]bool{}
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var doc struct {
			Spec struct {
				Template struct {
					Spec corev1.PodSpec `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("the conformance suite's %s: %v", manifests, err)
		}
		for _, ctr := range append(doc.Spec.Template.Spec.InitContainers, doc.Spec.Template.Spec.Containers...) {
			refs[ctr.Image] = true
		}
	}
	if len(refs) != 1 {
		t.Fatalf("the conformance suite's %s runs images %v, want one (its echo app)", manifests, refs)
	}
	for ref := range refs {
		tag, err := name.NewTag(ref, name.StrictValidation)
		if err != nil {
			t.Fatalf("the conformance suite's %s: image %q: %v", manifests, ref, err)
		}
		return tag
	}
	return name.Tag{}
}

// conformanceOptions are the suite's options for this cluster: MESH-HTTP
// with conformanceFeatures, the namespaces labelled for injection, the
// report's implementation, and whatever of the suite's flags the command
// line sets (-args -run-test=...).
func (c *Cluster) conformanceOptions(t *testing.T) suite.ConformanceOptions {
	t.Helper()
	// controller-runtime's logs go where client-go's do (klog: discarded
	// unless MESHLET_TEST_LOG is set, TestMain).
	ctrllog.SetLogger(klog.Background())
	// The suite's own scheme, rather than adding Gateway API's types to
	// client-go's global one under the other tests.
	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme,
		gatewayv1.Install, v1alpha2.Install, v1alpha3.Install, xv1alpha1.Install} {
		if err := add(scheme); err != nil {
			t.Fatalf("the conformance suite's scheme: %v", err)
		}
	}
	// The suite sets its config's user agent per test.
	cfg := rest.CopyConfig(c.Config)
	clientOpts := client.Options{Scheme: scheme}
	cl, err := client.New(cfg, clientOpts)
	if err != nil {
		t.Fatalf("the conformance suite's client: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "conformance-report.yaml")
	if p := os.Getenv(conformanceReportEnv); p != "" {
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, p)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatalf("%s=%s: %v", conformanceReportEnv, os.Getenv(conformanceReportEnv), err)
		}
		report = p
	}
	version := "dev"
	if out, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	}
	opts := suite.ConformanceOptions{
		ConfigurableOptions: suite.ConfigurableOptions{
			ConformanceProfiles: []suite.ConformanceProfileName{suite.MeshHTTPConformanceProfileName, suite.MeshGRPCConformanceProfileName},
			// Explicit, or the suite would try to read them from a
			// GatewayClass's status.
			SupportedFeatures: conformanceFeatures,
			NamespaceLabels:   map[string]string{webhook.NamespaceLabel: "enabled"},
			Implementation: confv1.Implementation{Organization: "meshlet-dev", Project: "meshlet", URL: "https://github.com/meshlet-dev/meshlet",
				Version: version, Contact: []string{"https://github.com/meshlet-dev/meshlet/issues"}},
			ReportOutputPath:     report,
			CleanupBaseResources: true,
			CleanupTestResources: true,
			// Every test ends before RunConformanceWithOptions returns, so
			// that what follows it sees them all (the mesh tests are not
			// parallel anyway; only the Gateway tests the profile skips).
			DisableParallelTests: true,
			TimeoutConfig:        conformanceconfig.DefaultTimeoutConfig(),
			Mode:                 flags.DefaultMode,
		},
		Client:        cl,
		ClientOptions: clientOpts,
		Clientset:     c.Client,
		RestConfig:    cfg,
		ManifestFS:    []fs.FS{&conformance.Manifests},
	}
	flags.ApplyAll(&opts.ConfigurableOptions)
	t.Logf("conformance report: %s (implementation version %s)", opts.ReportOutputPath, version)
	return opts
}

// conformanceResults collects what each of the suite's tests gave (its
// Hook), for the summary.
type conformanceResults struct {
	mu sync.Mutex
	// last is when the previous test ended: the next one's start.
	last    time.Time
	results []conformanceResult
}

// conformanceResult is one test of the suite.
type conformanceResult struct {
	name, result string
	mesh         bool
	took         time.Duration
}

// record notes test's result and returns when it started.
func (r *conformanceResults) record(st *testing.T, test suite.ConformanceTest) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := "passed"
	switch {
	case st.Failed():
		res = "FAILED"
	case st.Skipped():
		res = "skipped"
	}
	since := r.last
	r.last = time.Now()
	r.results = append(r.results, conformanceResult{name: test.ShortName, result: res,
		mesh: slices.Contains(test.Features, features.SupportMesh), took: r.last.Sub(since)})
	return since
}

// summary lists the tests that ran and the mesh tests skipped, and
// counts the other tests skipped (the Gateway ones).
func (r *conformanceResults) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	count := map[string]int{}
	other := 0
	for _, x := range r.results {
		count[x.result]++
		if x.result == "skipped" && !x.mesh {
			other++
			continue
		}
		fmt.Fprintf(&b, "  %-8s %-45s %6.1f s\n", x.result, x.name, x.took.Seconds())
	}
	fmt.Fprintf(&b, "  %d passed, %d failed, %d skipped (%d of them not mesh tests)", count["passed"], count["FAILED"], count["skipped"], other)
	return b.String()
}

// sidecarLogs logs the sidecar's log (webhook.ProxyContainer) of every
// pod of namespaces matching selector: its last lines, since since if
// set.
func (c *Cluster) sidecarLogs(t *testing.T, selector string, since *time.Time, lines int64, namespaces ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ns := range namespaces {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Logf("sidecar logs: pods in %s: %v", ns, err)
			continue
		}
		for _, p := range pods.Items {
			o := &corev1.PodLogOptions{Container: webhook.ProxyContainer, TailLines: &lines}
			if since != nil {
				o.SinceTime = &metav1.Time{Time: *since}
			}
			b, err := c.Client.CoreV1().Pods(ns).GetLogs(p.Name, o).Do(ctx).Raw()
			if err != nil {
				t.Logf("sidecar log of %s/%s: %v", ns, p.Name, err)
				continue
			}
			t.Logf("sidecar log of %s/%s (%s, last %d lines):\n%s", ns, p.Name, p.Status.PodIP, lines, b)
		}
	}
}

// checkSuitePulls fails unless every container of the suite's pods runs
// either the sidecar of the suite's registry by digest or the suite's
// echo image by its upstream name, and the kubelet reports for each the
// digest pushed (for the echo image: pushed, its upstream repository at
// the digest of the index in the suite's registry), which the nodes'
// containerds fetched from the suite's registry: nothing came from the
// Internet.
func (c *Cluster) checkSuitePulls(t *testing.T, echo name.Tag, pushed name.Digest) {
	t.Helper()
	want := map[string]string{c.Images.Sidecar: c.Images.Sidecar, echo.String(): pushed.String()}
	n := 0
	for _, ns := range []string{suite.MeshNamespace, suite.MeshConsumerNamespace} {
		pods, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("pods in %s: %v", ns, err)
		}
		for _, p := range pods.Items {
			status := map[string]string{}
			for _, st := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				status[st.Name] = st.ImageID
			}
			for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
				id, ok := want[ctr.Image]
				switch {
				case !ok:
					t.Errorf("pod %s/%s container %s runs %s: neither the suite's echo image %s nor the sidecar %s", ns, p.Name, ctr.Name, ctr.Image, echo, c.Images.Sidecar)
				case status[ctr.Name] != id:
					t.Errorf("pod %s/%s container %s (%s): the kubelet reports imageID %q, want the digest pushed: %s", ns, p.Name, ctr.Name, ctr.Image, status[ctr.Name], id)
				default:
					n++
				}
			}
		}
	}
	c.checkFetched(t, echo.String(), pushed)
	t.Logf("%d containers of the suite's pods run the sidecar and %s as pushed to the suite's registry (%s)", n, echo, pushed.DigestStr())
}
