package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/meshlet-dev/meshlet/deploy"
	"github.com/meshlet-dev/meshlet/injector"
	"github.com/meshlet-dev/meshlet/webhook"
)

// injectorArgs are the injector container's args in a rendered manifest.
func injectorArgs(t *testing.T, manifest []byte) []string {
	t.Helper()
	for _, doc := range bytes.Split(manifest, []byte("\n---\n")) {
		var d appsv1.Deployment
		if err := yaml.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "Deployment" && d.Name == "meshlet-injector" {
			return d.Spec.Template.Spec.Containers[0].Args
		}
	}
	t.Fatal("no meshlet-injector Deployment in the manifest")
	return nil
}

// The Helm chart's renderings (deploy/meshlet.yaml, its default values;
// deploy/testdata/helm's golden sets) give the real `injector serve`
// command line args it accepts, and the options they produce are the
// values': with the defaults, exactly the injector's built-in sidecar
// settings (so the chart and the binary cannot drift apart unseen).
func TestChartArgs(t *testing.T) {
	defaults := webhook.DefaultConfig()
	defaults.MTLSMode = "PERMISSIVE"
	withRes := func(c webhook.Config, req, lim corev1.ResourceList) webhook.Config {
		c.Resources = corev1.ResourceRequirements{Requests: req, Limits: lim}
		return c
	}
	q := resource.MustParse
	strict := defaults
	strict.MTLSMode, strict.Concurrency, strict.IdentityCSIDriver = "STRICT", 1, "spiffe.csi.cert-manager.io"
	custom := withRes(defaults, corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("64Mi")},
		corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("512Mi")})
	custom.Image, custom.ImagePullPolicy = "registry.example/meshlet/sidecar@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945", corev1.PullAlways
	golden := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "testdata", "helm", name+".golden.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name        string
		manifest    []byte
		sidecar     webhook.Config
		trustDomain string
		ttl         time.Duration
	}{
		{"meshlet.yaml", deploy.Manifest, defaults, "cluster.local", 24 * time.Hour},
		{"monitoring", golden("monitoring"), defaults, "cluster.local", 24 * time.Hour},
		{"strict-mtls", golden("strict-mtls"), strict, "prod.example", 6 * time.Hour},
		{"custom-images", golden("custom-images"), custom, "cluster.local", 24 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got *injector.Options
			startServe = func(opts injector.Options, kubeconfig, controlPlane, extraHosts string) error {
				got = &opts
				return nil
			}
			defer func() { startServe = serve }()
			args := injectorArgs(t, c.manifest)
			if err := run(args, strings.NewReader(""), io.Discard); err != nil {
				t.Fatalf("injector %s: %v", strings.Join(args, " "), err)
			}
			if got == nil {
				t.Fatalf("injector %s did not serve", strings.Join(args, " "))
			}
			if !apiequality.Semantic.DeepEqual(got.Sidecar, c.sidecar) {
				t.Errorf("injected sidecar settings\n got  %+v\n want %+v", got.Sidecar, c.sidecar)
			}
			if got.TrustDomain != c.trustDomain || got.CertTTL != c.ttl || got.ShutdownDelay != 5*time.Second {
				t.Errorf("trust domain %q, cert TTL %v, shutdown delay %v; want %q, %v, 5s", got.TrustDomain, got.CertTTL, got.ShutdownDelay, c.trustDomain, c.ttl)
			}
		})
	}
}
