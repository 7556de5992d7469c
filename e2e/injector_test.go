//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshlet-dev/meshlet/deploy"
	"github.com/meshlet-dev/meshlet/discovery/adsclient"
	"github.com/meshlet-dev/meshlet/injector"
	"github.com/meshlet-dev/meshlet/sds"
	"github.com/meshlet-dev/meshlet/webhook"
)

func startInjector(t testing.TB, c *Cluster) (*injector.Server, context.CancelFunc) {
	t.Helper()
	return startInjectorWith(t, c, func(*injector.Options) {})
}

// startInjectorWith is startInjector with options changed by edit. The
// injector talks to the API server as its own ServiceAccount
// (meshlet-system/meshlet-injector, from deploy/ which must be applied),
// so the tests prove that deploy/'s least-privilege RBAC is enough.
func startInjectorWith(t testing.TB, c *Cluster, edit func(*injector.Options)) (*injector.Server, context.CancelFunc) {
	t.Helper()
	return startInjectorWrapped(t, c, nil, edit)
}

// startInjectorWrapped is startInjectorWith whose client sends its
// requests through wrap (nil: unwrapped), to observe them.
func startInjectorWrapped(t testing.TB, c *Cluster, wrap func(http.RoundTripper) http.RoundTripper, edit func(*injector.Options)) (*injector.Server, context.CancelFunc) {
	t.Helper()
	exp := int64(3600)
	tr, err := c.Client.CoreV1().ServiceAccounts("meshlet-system").CreateToken(context.Background(), "meshlet-injector",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for the injector's ServiceAccount (is deploy/ applied?): %v", err)
	}
	sa := rest.AnonymousClientConfig(c.Config)
	sa.BearerToken = tr.Status.Token
	if wrap != nil {
		sa.Wrap(wrap)
	}
	client, err := kubernetes.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	opts := injector.DefaultOptions()
	opts.Hosts = []string{"127.0.0.1", "localhost"}
	opts.WebhookAddr, opts.GRPCAddr, opts.MonitoringAddr, opts.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	edit(&opts)
	s := injector.New(client, opts)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	select {
	case <-waitAddrs(s):
	case err := <-errc:
		t.Fatalf("injector: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("injector did not start")
	}
	return s, cancel
}

func waitAddrs(s *injector.Server) <-chan struct{} {
	ch := make(chan struct{})
	go func() { s.Addrs(); close(ch) }()
	return ch
}

// TestInjectorServe: the real control-plane process logic against a real
// API server. deploy/ applied, the webhook pointed at the injector by URL
// with no caBundle: the injector creates the mesh CA Secret, patches the
// caBundle itself, publishes the root CA ConfigMap to namespaces, injects a
// labelled namespace's pod and counts it in its metrics; a restart (a
// second replica) reuses the same CA.
func TestInjectorServe(t *testing.T) {
	c := StartCluster(t)
	ctx := context.Background()
	c.Kubectl(t, string(deploy.Manifest), "apply", "-f", "-")
	s, stop := startInjector(t, c)
	defer stop()
	url := "https://" + s.Addrs()["webhook"] + "/inject"
	patch := fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/clientConfig","value":{"url":%q}},{"op":"replace","path":"/webhooks/1/clientConfig","value":{"url":%q}}]`, url, url)
	c.Kubectl(t, "", "patch", "mutatingwebhookconfiguration", "meshlet-injector", "--type=json", "-p", patch)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		mwc, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshlet-injector", metaGet)
		if err == nil && bytes.Equal(mwc.Webhooks[0].ClientConfig.CABundle, s.RootPEM()) && bytes.Equal(mwc.Webhooks[1].ClientConfig.CABundle, s.RootPEM()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the injector never patched the caBundle")
		}
	}
	if _, err := c.Client.CoreV1().Secrets("meshlet-system").Get(ctx, "meshlet-ca", metaGet); err != nil {
		t.Errorf("CA Secret: %v", err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop",
		Labels: map[string]string{webhook.NamespaceLabel: "enabled"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitDefaultSA(t, "shop")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		p, err := c.Client.CoreV1().Pods("shop").Create(ctx, testPod("web-1"), metav1.CreateOptions{})
		if err == nil && injected(p) {
			break
		}
		if err == nil {
			zero := int64(0)
			c.Client.CoreV1().Pods("shop").Delete(ctx, "web-1", metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod never injected through the injector (last error %v)", err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cm, err := c.Client.CoreV1().ConfigMaps("shop").Get(ctx, webhook.DefaultRootCACM, metaGet)
		if err == nil && cm.Data["root-cert.pem"] == string(s.RootPEM()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("root CA ConfigMap not published in shop: %v", err)
		}
	}
	resp, err := http.Get("http://" + s.Addrs()["monitoring"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `meshlet_injector_injections_total{result="injected"}`) ||
		strings.Contains(string(metrics), `meshlet_injector_injections_total{result="injected"} 0`) ||
		!strings.Contains(string(metrics), "meshlet_injector_admission_duration_seconds_count") {
		t.Errorf("metrics:\n%s", metrics)
	}
	checkXDSAuth(t, c, s)
	// A second replica (or a restart) loads the same CA from the Secret.
	s2, stop2 := startInjector(t, c)
	defer stop2()
	if !bytes.Equal(s2.RootPEM(), s.RootPEM()) {
		t.Error("a second injector made a new CA instead of loading the stored one")
	}
}

// checkXDSAuth: the injector's xDS port, dialled the way an injected
// sidecar dials it (TLS against the mesh root, the projected ServiceAccount
// token as a bearer token), serves a pod of namespace shop, and refuses a
// stream whose token the API server does not know.
func checkXDSAuth(t *testing.T, c *Cluster, s *injector.Server) {
	t.Helper()
	ctx := context.Background()
	exp := int64(600)
	tr, err := c.Client.CoreV1().ServiceAccounts("shop").CreateToken(ctx, "default", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{sds.TokenAudience}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.RootPEM())
	dial := func(token string) *adsclient.Client {
		conn, err := grpc.NewClient(s.Addrs()["grpc"],
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})),
			grpc.WithPerRPCCredentials(bearer(token)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		ads, err := adsclient.New(adsclient.Options{Conn: conn, Node: &corev3.Node{Id: "web-1.shop"},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		go ads.Run(rctx)
		return ads
	}
	good, bad := dial(tr.Status.Token), dial("not-a-token")
	select {
	case <-good.Ready():
	case <-time.After(30 * time.Second):
		t.Fatalf("xds with a ServiceAccount token never became ready: %+v", good.Stats())
	}
	for deadline := time.Now().Add(10 * time.Second); bad.Stats().Streams < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the bad-token client did not retry: %+v", bad.Stats())
		}
	}
	select {
	case <-bad.Ready():
		t.Fatal("xds with a bogus token became ready")
	default:
	}
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }
