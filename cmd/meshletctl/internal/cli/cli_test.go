package cli

import (
	"bytes"
	"io"
	"net"
	"os"
	"strings"
	"testing"
)

const manifest = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: web:1}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: job, image: job:1}]
---
apiVersion: v1
kind: Pod
metadata: {name: opted-out, labels: {meshlet.io/inject: "false"}}
spec:
  containers: [{name: a, image: a:1}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 80}]}
`

func TestInjectDryRun(t *testing.T) {
	var out bytes.Buffer
	if err := Run([]string{"inject", "-f", "-"}, strings.NewReader(manifest), &out); err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(out.String(), "---\n")
	if len(docs) != 4 {
		t.Fatalf("%d documents out:\n%s", len(docs), out.String())
	}
	for i, want := range []bool{true, true, false, false} {
		if got := strings.Contains(docs[i], "meshlet-proxy"); got != want {
			t.Errorf("document %d injected=%v, want %v:\n%s", i, got, want, docs[i])
		}
	}
	if !strings.Contains(docs[1], "restartPolicy: Always") || !strings.Contains(docs[0], "meshlet.io/status") {
		t.Error("native sidecar or status annotation missing")
	}
	if err := Run([]string{"inject"}, strings.NewReader(""), &out); err == nil {
		t.Error("inject without -f accepted")
	}
	if err := Run([]string{"inject", "-f", "-"}, strings.NewReader("kind: Pod\nspec: [1"), &out); err == nil {
		t.Error("broken YAML accepted")
	}
}

// meshletctl check reaches its cluster through the kubeconfig it is given: a
// missing one is the command's error, naming the file, and a cluster that
// does not answer is a failed check, not a pass.
func TestCheckNeedsItsCluster(t *testing.T) {
	dir := t.TempDir()
	missing := dir + "/nowhere.kubeconfig"
	err := Run([]string{"check", "-kubeconfig", missing}, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "kubeconfig") || !strings.Contains(err.Error(), "nowhere.kubeconfig") {
		t.Errorf("check with a missing kubeconfig: %v, want an error naming it", err)
	}
	// An API server on a loopback port nothing listens on (the listener is
	// closed before the check dials it).
	l, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		t.Fatal(lerr)
	}
	addr := l.Addr().String()
	l.Close()
	kc := dir + "/closed.kubeconfig"
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://"+addr+"\", insecure-skip-tls-verify: true}}]\n"+
		"users: [{name: u, user: {token: x}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = Run([]string{"check", "-kubeconfig", kc}, strings.NewReader(""), &out)
	if err == nil || !strings.Contains(out.String(), "FAIL  Kubernetes >= 1.29") || !strings.Contains(out.String(), "FAIL  nodes: list nodes") {
		t.Errorf("check against a closed port: %v\n%s\nwant the version and node checks failed", err, out.String())
	}
}

// POD[.NAMESPACE] as istioctl reads it: the namespace after the last dot.
func TestPodArg(t *testing.T) {
	for _, c := range []struct{ arg, n, wantPod, wantNS string }{
		{"web-0", "", "web-0", "ctx"},
		{"web-0.shop", "", "web-0", "shop"},
		{"my.app-7d9c-x.shop", "", "my.app-7d9c-x", "shop"},
		{"web-0.shop", "shop", "web-0", "shop"},
		{"my.app", "shop", "my.app", "shop"},
		{"web-0.", "", "web-0.", "ctx"},
	} {
		if pod, ns := podArg(c.arg, c.n, "ctx"); pod != c.wantPod || ns != c.wantNS {
			t.Errorf("podArg(%q, -n %q) = %s/%s, want %s/%s", c.arg, c.n, ns, pod, c.wantNS, c.wantPod)
		}
	}
}
