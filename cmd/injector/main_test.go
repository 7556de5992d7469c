package main

import (
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshlet-dev/meshlet/webhook"
)

// TestServeRejectsBadFlags: a bad flag value is refused, naming the flag,
// before any connection to the cluster.
func TestServeRejectsBadFlags(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"-image-pull-policy Sometimes", `-image-pull-policy "Sometimes"`},
		{"-control-plane 10.250.0.1", `-control-plane "10.250.0.1": want HOST:PORT`},
		{"-mtls-mode DISABLE", `-mtls-mode "DISABLE": want STRICT or PERMISSIVE`},
		{"-proxy-memory-limit lots", `-proxy-memory-limit "lots"`},
		{"-shutdown-delay -1s", `-shutdown-delay -1s: want 0 or more`},
	} {
		err := run(append([]string{"serve"}, strings.Fields(c.args)...), strings.NewReader(""), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %s: %v, want an error with %q", c.args, err, c.want)
		}
	}
}

// The proxy resource flags set, replace or (empty) remove each quantity of
// the injected container, starting from webhook.DefaultConfig's.
func TestProxyResourceFlags(t *testing.T) {
	res := webhook.DefaultConfig().Resources
	for flag, v := range map[string]string{"proxy-cpu": "", "proxy-memory": "64Mi", "proxy-cpu-limit": "1", "proxy-memory-limit": "512Mi"} {
		for _, r := range proxyResources {
			if r.flag == flag {
				if err := setResource(&res, r, v); err != nil {
					t.Fatalf("-%s %q: %v", flag, v, err)
				}
			}
		}
	}
	if _, ok := res.Requests[corev1.ResourceCPU]; ok {
		t.Errorf("-proxy-cpu '': the CPU request %v is still there", res.Requests.Cpu())
	}
	if res.Requests.Memory().String() != "64Mi" || res.Limits.Cpu().String() != "1" || res.Limits.Memory().String() != "512Mi" {
		t.Errorf("resources %+v, want requests memory 64Mi, limits cpu 1 memory 512Mi", res)
	}
}
