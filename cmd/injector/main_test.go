package main

import (
	"bytes"
	"io"
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
	if err := run([]string{"inject", "-f", "-"}, strings.NewReader(manifest), &out); err != nil {
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
	if err := run([]string{"inject"}, strings.NewReader(""), &out); err == nil {
		t.Error("inject without -f accepted")
	}
	if err := run([]string{"inject", "-f", "-"}, strings.NewReader("kind: Pod\nspec: [1"), &out); err == nil {
		t.Error("broken YAML accepted")
	}
}

// TestServeRejectsBadFlags: a bad flag value is refused, naming the flag,
// before any connection to the cluster.
func TestServeRejectsBadFlags(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"-image-pull-policy Sometimes", `-image-pull-policy "Sometimes"`},
		{"-control-plane 10.250.0.1", `-control-plane "10.250.0.1": want HOST:PORT`},
	} {
		err := run(append([]string{"serve"}, strings.Fields(c.args)...), strings.NewReader(""), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %s: %v, want an error with %q", c.args, err, c.want)
		}
	}
}
