//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet-dev/meshlet/deploy"
	"github.com/meshlet-dev/meshlet/injector"
	"github.com/meshlet-dev/meshlet/internal/images"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/mtls"
	"github.com/meshlet-dev/meshlet/sds"
)

// fortioVersion is the load generator and test server of the mesh tests
// (the same as bench/proxy.sh).
const fortioVersion = "1.68.2"

// fortioBin installs fortio into the cache outside the clone once.
func fortioBin(t *testing.T) string {
	t.Helper()
	return testtool.GoInstall(t, "fortio.org/fortio", "v"+fortioVersion)
}

// sidecarBin builds cmd/sidecar once per test binary, as the node
// images' is built (images.GoBuild: as make sidecar builds it, but
// -pgo=off, which changes no behaviour and would compile every package a
// second time on a cold cache).
var sidecarBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "meshlet-e2e-bin")
	if err != nil {
		return "", err
	}
	if err := images.GoBuild(context.Background(), "..", dir, "off", v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, "./cmd/sidecar"); err != nil {
		return "", err
	}
	return filepath.Join(dir, "sidecar"), nil
})

// proc is a child process whose output is kept for failure messages.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuf
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.b.String()
	if len(v) > 6000 {
		v = v[len(v)-6000:]
	}
	return v
}

func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: &syncBuf{}}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func localPort(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// meshToken asks the API server for a token of namespace shop's service
// account sa, with audience aud.
func meshToken(t *testing.T, c *Cluster, sa, aud string) string {
	t.Helper()
	exp := int64(3600)
	tr, err := c.Client.CoreV1().ServiceAccounts("shop").CreateToken(context.Background(), sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{aud}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", sa, err)
	}
	return tr.Status.Token
}

// meshCluster is a real API server with the injector (SDS + xDS) serving
// certificates of ttl and namespace shop with service accounts client and
// web.
func meshCluster(t *testing.T, ttl time.Duration) (*Cluster, *injector.Server) {
	t.Helper()
	c := StartCluster(t)
	c.Kubectl(t, string(deploy.Manifest), "apply", "-f", "-")
	s, stop := startInjectorWith(t, c, func(o *injector.Options) { o.CertTTL = ttl })
	t.Cleanup(stop)
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"client", "web"} {
		if _, err := c.Client.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return c, s
}

// TestSDSTokenAuthentication: the injector's SDS port checks every caller
// with a TokenReview against the real API server. A token of the right
// audience gets its own identity signed; a wrong audience, an expired
// token (the API server's own signing key, exp in the past) and a CSR for
// another service account are refused.
func TestSDSTokenAuthentication(t *testing.T) {
	c, s := meshCluster(t, time.Hour)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.RootPEM())
	conn, err := grpc.NewClient(s.Addrs()["grpc"], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := secretv3.NewSecretDiscoveryServiceClient(conn)
	clientID := spiffeid.RequireFromString("spiffe://cluster.local/ns/shop/sa/client")
	webID := spiffeid.RequireFromString("spiffe://cluster.local/ns/shop/sa/web")
	fetch := func(token string, id spiffeid.ID) error {
		key, _ := mtls.NewKey()
		csr, _ := mtls.NewCSR(key, id)
		md, _ := structpb.NewStruct(map[string]any{sds.CSRMetadataKey: string(csr)})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := api.FetchSecrets(ctx, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "t", Metadata: md},
			ResourceNames: []string{sds.CertificateResource}, TypeUrl: sds.SecretTypeURL}, grpc.PerRPCCredentials(bearer(token)))
		if err == nil && len(resp.Resources) != 1 {
			return fmt.Errorf("%d resources", len(resp.Resources))
		}
		return err
	}
	good := meshToken(t, c, "client", sds.TokenAudience)
	if err := fetch(good, clientID); err != nil {
		t.Fatalf("the right token and CSR were refused: %v", err)
	}
	saKey := readRSAKey(t, filepath.Join(c.Dir, "sa.key"))
	// Control: the same claims re-signed with the API server's key pass,
	// so the expired copy below is refused for its expiry alone.
	if err := fetch(resign(t, good, saKey, 0), clientID); err != nil {
		t.Fatalf("a re-signed copy of a good token was refused (the forging is wrong): %v", err)
	}
	cases := []struct {
		name  string
		token string
		id    spiffeid.ID
		code  codes.Code
		want  string
	}{
		{"wrong audience", meshToken(t, c, "client", "not-meshlet"), clientID, codes.Unauthenticated, "audience"},
		{"expired token", resign(t, good, saKey, -2*time.Hour), clientID, codes.Unauthenticated, "expired"},
		{"CSR for another service account", good, webID, codes.PermissionDenied, webID.String()},
		{"no token", "", clientID, codes.Unauthenticated, "authorization"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := fetch(tc.token, tc.id)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %s saying %q", err, tc.code, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func readRSAKey(t *testing.T, path string) *rsa.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// resign re-signs a JWT's claims with key (RS256, same header), moving
// iat, nbf and exp by shift.
func resign(t *testing.T, token string, key *rsa.PrivateKey, shift time.Duration) string {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"iat", "nbf", "exp"} {
		if v, ok := claims[k].(float64); ok {
			claims[k] = int64(v) + int64(shift.Seconds())
		}
	}
	body, _ := json.Marshal(claims)
	signing := parts[0] + "." + base64.RawURLEncoding.EncodeToString(body)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// TestMeshRotationUnderLoad: two real sidecar processes get 10-second
// certificates from the injector over SDS (tokens checked by the real API
// server) and carry fortio's 1000 requests per second between them over
// mutual TLS for 2 minutes (MESHLET_ROTATION_DURATION overrides): no
// request fails, a TCP connection held open the whole time keeps
// working, and the pooled sidecar-to-sidecar connections survive every
// rotation.
func TestMeshRotationUnderLoad(t *testing.T) {
	duration := 2 * time.Minute
	if v := os.Getenv("MESHLET_ROTATION_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("MESHLET_ROTATION_DURATION: %v", err)
		}
		duration = d
	}
	const ttl = 10 * time.Second
	fortio := fortioBin(t)
	sidecar, err := sidecarBin()
	if err != nil {
		t.Fatal(err)
	}
	c, s := meshCluster(t, ttl)
	dir := t.TempDir()
	root := writeFile(t, dir, "root.pem", string(s.RootPEM()))
	grpcAddr := s.Addrs()["grpc"]

	// The apps: fortio's HTTP echo server and its TCP echo server.
	appHTTP, appTCP := localPort(t, "127.0.0.1"), localPort(t, "127.0.0.1")
	startProc(t, "fortio-server", fortio, "server", "-http-port", appHTTP, "-tcp-port", appTCP, "-grpc-port", "disabled",
		"-redirect-port", "disabled", "-udp-port", "disabled")
	// The apps listen before the sidecars send them anything.
	for _, addr := range []string{appHTTP, appTCP} {
		waitFor(t, "fortio listening on "+addr, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return false, err.Error()
			}
			c.Close()
			return true, ""
		})
	}

	webIn, webTCPIn := localPort(t, "127.0.0.2"), localPort(t, "127.0.0.3")
	webAdmin, webHealth := localPort(t, "127.0.0.1"), localPort(t, "127.0.0.1")
	webCfg := fmt.Sprintf(`node: {id: web-0.shop, cluster: web}
admin: %s
health: %s
prometheus: ""
access_log: {path: %s, flush_interval: 50ms}
listeners:
  - {name: inbound-http, address: %s, direction: inbound,
     mtls: {mode: STRICT, principals: ["spiffe://cluster.local/ns/shop/sa/client"]},
     routes: [{cluster: app}]}
  - {name: inbound-tcp, address: %s, direction: inbound, protocol: tcp,
     mtls: {mode: STRICT, principals: ["spiffe://cluster.local/ns/shop/sa/client"]},
     routes: [{cluster: app-tcp}]}
clusters:
  - {name: app, type: STATIC, connect_timeout: 1s, load_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %s}}}}]}]}}
  - {name: app-tcp, type: STATIC, connect_timeout: 1s, load_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %s}}}}]}]}}
`, webAdmin, webHealth, filepath.Join(dir, "web-access.log"), webIn, webTCPIn, portOf(appHTTP), portOf(appTCP))
	meshed := func(addr string) string {
		host, port, _ := net.SplitHostPort(addr)
		return fmt.Sprintf(`{endpoint: {address: {socket_address: {address: %s, port_value: %s}}}, metadata: {filter_metadata: {meshlet.io: {meshed: true, identity: "spiffe://cluster.local/ns/shop/sa/web"}}}}`, host, port)
	}
	clientOut, clientTCPOut := localPort(t, "127.0.0.1"), localPort(t, "127.0.0.4")
	clientAdmin, clientHealth := localPort(t, "127.0.0.1"), localPort(t, "127.0.0.1")
	clientCfg := fmt.Sprintf(`node: {id: client-0.shop, cluster: client}
admin: %s
health: %s
prometheus: ""
access_log: {path: off}
listeners:
  - {name: outbound, address: %s, original_destination: "10.96.0.50:80", routes: [{cluster: web, retry_policy: {retry_on: "connect-failure,refused-stream", num_retries: 2}}]}
  - {name: outbound-tcp, address: %s, protocol: tcp, original_destination: "10.96.0.50:7000", routes: [{cluster: web-tcp}]}
clusters:
  - {name: web, type: STATIC, connect_timeout: 1s, load_assignment: {endpoints: [{lb_endpoints: [%s]}]}}
  - {name: web-tcp, type: STATIC, connect_timeout: 1s, load_assignment: {endpoints: [{lb_endpoints: [%s]}]}}
`, clientAdmin, clientHealth, clientOut, clientTCPOut, meshed(webIn), meshed(webTCPIn))

	run := func(name, cfg, sa string) {
		tok := writeFile(t, dir, sa+".token", meshToken(t, c, sa, sds.TokenAudience))
		startProc(t, name, sidecar, "run", "-config", writeFile(t, dir, name+".yaml", cfg), "-watch", "0",
			"-sds", grpcAddr, "-sds-ca", root, "-sds-token", tok, "-identity", "spiffe://cluster.local/ns/shop/sa/"+sa)
	}
	run("sidecar-web", webCfg, "web")
	run("sidecar-client", clientCfg, "client")
	for _, h := range []string{webHealth, clientHealth} {
		waitReady(t, h)
	}

	// A TCP connection through both sidecars, open for the whole run.
	tcpDone := make(chan error, 1)
	stopTCP := make(chan struct{})
	go func() { tcpDone <- holdTCP(clientTCPOut, stopTCP) }()

	// Watch the client's certificate: each renewal raises the time left.
	var renewals, minLeft = 0, ttl.Seconds()
	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		last := -1.0
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(500 * time.Millisecond):
			}
			left, ok := metricValue(clientAdmin, "meshlet_workload_cert_expiry_seconds")
			if !ok {
				continue
			}
			if last >= 0 && left > last+0.5 {
				renewals++
			}
			minLeft = min(minLeft, left)
			last = left
		}
	}()

	jsonOut := filepath.Join(dir, "fortio.json")
	load := exec.Command(fortio, "load", "-quiet", "-qps", "1000", "-c", "16", "-t", duration.String(), "-json", jsonOut,
		"-allow-initial-errors=false", "http://"+clientOut+"/echo?size=256")
	out, err := load.CombinedOutput()
	close(stopWatch)
	<-watchDone
	close(stopTCP)
	if err != nil {
		t.Fatalf("fortio load: %v\n%s", err, tail(string(out), 3000))
	}
	var res struct {
		DurationHistogram struct{ Count int64 }
		RetCodes          map[string]int64
		ActualQPS         float64
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	ok200 := res.RetCodes["200"]
	t.Logf("fortio: %d requests in %v (%.0f qps), codes %v; client certificate renewed %d times (least time left %.1fs)",
		res.DurationHistogram.Count, duration, res.ActualQPS, res.RetCodes, renewals, minLeft)
	if ok200 != res.DurationHistogram.Count || ok200 < int64(duration.Seconds()*1000*0.95) {
		t.Errorf("failed requests: %d of %d were 200 (want all, at 1000 qps)", ok200, res.DurationHistogram.Count)
	}
	if want := int(duration/ttl) - 1; renewals < want {
		t.Errorf("the client certificate was renewed %d times in %v with a %v lifetime, want at least %d", renewals, duration, ttl, want)
	}
	if minLeft <= 0 {
		t.Errorf("the client's certificate expired during the run (least time left %.1fs)", minLeft)
	}
	if err := <-tcpDone; err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "web-access.log"))
		var tcpLines []string
		for _, line := range strings.Split(string(log), "\n") {
			if !strings.Contains(line, "HTTP/") && line != "" {
				tcpLines = append(tcpLines, line)
			}
		}
		t.Errorf("the long-lived TCP connection: %v\nthe web sidecar's TCP access-log lines:\n%s", err, strings.Join(tcpLines, "\n"))
	}
	// The pooled connections to the peer sidecar were not replaced by the
	// rotations: at most one per worker and protocol, plus fortio's
	// warm-up.
	hs, _ := metricValue(webAdmin, `meshlet_mtls_handshakes_total{direction="inbound",result="ok"}`)
	t.Logf("the web sidecar accepted %v mTLS handshakes in the whole run", hs)
	if hs < 2 || hs > 6 {
		t.Errorf("web sidecar accepted %v mTLS handshakes over the run, want one per client worker and protocol", hs)
	}
	logB, _ := os.ReadFile(filepath.Join(dir, "web-access.log"))
	if !strings.Contains(string(logB), "spiffe://cluster.local/ns/shop/sa/client") {
		t.Errorf("the web sidecar's access log lacks the peer identity:\n%s", tail(string(logB), 1000))
	}
}

func portOf(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func waitReady(t *testing.T, health string) {
	t.Helper()
	waitHTTP(t, "http://"+health+"/healthz/ready", 60*time.Second, "sidecar", func() string { return "" })
}

// holdTCP keeps one connection open through the mesh, echoing a line
// every 500 ms until stop.
func holdTCP(addr string, stop <-chan struct{}) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for i := 0; ; i++ {
		select {
		case <-stop:
			if i < 10 {
				return fmt.Errorf("only %d echoes", i)
			}
			return nil
		case <-time.After(500 * time.Millisecond):
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		msg := fmt.Sprintf("line %d\n", i)
		if _, err := io.WriteString(c, msg); err != nil {
			return fmt.Errorf("write %d: %w", i, err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(r, got); err != nil || string(got) != msg {
			return fmt.Errorf("echo %d: %q, %v", i, got, err)
		}
	}
}

var sampleRE = regexp.MustCompile(`^(\S+) (\S+)$`)

// metricValue reads one sample (name with labels, exactly) from a
// sidecar's admin /stats/prometheus.
func metricValue(admin, sample string) (float64, bool) {
	resp, err := http.Get("http://" + admin + "/stats/prometheus")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := sampleRE.FindStringSubmatch(sc.Text())
		if m != nil && m[1] == sample {
			v, err := strconv.ParseFloat(m[2], 64)
			return v, err == nil
		}
	}
	return 0, false
}
