//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshlet-dev/meshlet/deploy"
	"github.com/meshlet-dev/meshlet/injector"
	"github.com/meshlet-dev/meshlet/webhook"
)

// BenchmarkAdmission: the injector (as its own ServiceAccount, registered
// through clientConfig.url) behind a real kube-apiserver; pods of a
// labelled namespace are created at 100 per second for 10 seconds with a
// server-side dry run (admission runs in full, nothing is stored). Each
// iteration is one such run. Reported: the time inside the webhook handler
// (decode, namespace lookup, injection, JSON patch, encode) and the
// client's whole create call, p50 and p99. bench/admission.sh writes the
// table in bench/RESULTS.md.
func BenchmarkAdmission(b *testing.B) {
	const rate, seconds = 100, 10
	c := StartCluster(b)
	ctx := context.Background()
	c.Kubectl(b, string(deploy.Manifest), "apply", "-f", "-")
	var mu sync.Mutex
	var inside []time.Duration
	s, stop := startInjectorWith(b, c, func(o *injector.Options) {
		o.ObserveAdmission = func(d time.Duration) { mu.Lock(); inside = append(inside, d); mu.Unlock() }
	})
	defer stop()
	url := "https://" + s.Addrs()["webhook"] + "/inject"
	patch := fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/clientConfig","value":{"url":%q}},{"op":"replace","path":"/webhooks/1/clientConfig","value":{"url":%q}}]`, url, url)
	c.Kubectl(b, "", "patch", "mutatingwebhookconfiguration", "meshlet-injector", "--type=json", "-p", patch)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop",
		Labels: map[string]string{webhook.NamespaceLabel: "enabled"}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	c.waitDefaultSA(b, "shop")
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// client-go's default limit (5 requests/s) would pace the load itself.
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 4*rate, 4*rate
	pods := kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods("shop")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		p, err := pods.Create(ctx, testPod("warm"), dry)
		if err == nil && injected(p) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("pods are not injected through the injector (last error %v)", err)
		}
	}
	var client []time.Duration
	b.ResetTimer()
	for b.Loop() {
		mu.Lock()
		inside = inside[:0]
		mu.Unlock()
		client = client[:0]
		var wg sync.WaitGroup
		var cmu sync.Mutex
		errs := 0
		tick := time.NewTicker(time.Second / rate)
		for i := range rate * seconds {
			<-tick.C
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				p, err := pods.Create(ctx, testPod(fmt.Sprintf("web-%d", i)), dry)
				d := time.Since(t0)
				cmu.Lock()
				defer cmu.Unlock()
				if err != nil || !injected(p) {
					errs++
					return
				}
				client = append(client, d)
			}()
		}
		tick.Stop()
		wg.Wait()
		if errs > 0 {
			b.Fatalf("%d of %d admissions failed or were not injected", errs, rate*seconds)
		}
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	if len(inside) < rate*seconds {
		b.Fatalf("the webhook saw %d reviews, want %d", len(inside), rate*seconds)
	}
	q := func(ds []time.Duration, p float64) float64 {
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Seconds() * 1000
	}
	b.ReportMetric(q(inside, 0.5), "webhook-p50-ms")
	b.ReportMetric(q(inside, 0.99), "webhook-p99-ms")
	b.ReportMetric(q(client, 0.5), "create-p50-ms")
	b.ReportMetric(q(client, 0.99), "create-p99-ms")
	b.ReportMetric(float64(len(client)), "admissions")
}
