//go:build e2e

// Package e2e holds meshlet's end-to-end tests against a real Kubernetes
// control plane: etcd, kube-apiserver and kube-controller-manager built
// from the Go module proxy by e2e/tools.sh and run on 127.0.0.1. Most
// tests have no kubelets: pods are bound to zone-labelled Node objects and
// their status is patched, and the real EndpointSlice controller does the
// rest. TestRealNodesMesh runs real nodes (StartNodes: kubelets,
// containerd, runc and CNI bridges on this machine, with kube-proxy and
// CoreDNS, e2e/tools.sh) with real pods and injected sidecars; its API
// server listens on the nodes' bridge.
package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshlet-dev/meshlet/internal/testtool"
)

// Cluster is a running control plane.
type Cluster struct {
	Dir        string
	Kubeconfig string
	Config     *rest.Config
	Client     *kubernetes.Clientset
	Bin        string
	CA         *x509.Certificate
	caKey      *ecdsa.PrivateKey
	procs      []*exec.Cmd
	logs       map[string]*bytes.Buffer
	nodes      bool
	// hostNet is the host side of the nodes' network (Nodes only).
	hostNet *hostNet
	// kubeletDirMade: /var/lib/kubelet did not exist before the nodes
	// started, so their teardown removes it.
	kubeletDirMade bool
	// Images are what the real nodes run, pulled from registry (both set
	// by StartNodes).
	Images   NodeImages
	registry *imageRegistry
}

// ClusterOptions change what StartClusterWith starts.
type ClusterOptions struct {
	// Nodes prepares the control plane for real kubelets (StartNodes): the
	// node lifecycle controller (it lifts the not-ready taint), pod
	// garbage collection, the Job and Endpoints controllers, kubelets
	// reached by their InternalIP, and the API server on ControlPlaneIP
	// (on the nodes' bridge, which it builds first), advertised there so
	// that the kubernetes Service's endpoint is an address pods reach
	// through kube-proxy. Without it the API server is on loopback and
	// Node objects are plain records the tests patch.
	Nodes bool
}

// freePort returns a loopback port nothing listens on (testtool.FreePorts:
// not one the kernel may hand to an outgoing connection meanwhile).
func freePort(t testing.TB) int { return testtool.FreePorts(t, "127.0.0.1", 1)[0] }

// toolsBin runs a tools script of this folder (which builds or finds cached
// binaries and prints their folder) unless env names the folder already.
func toolsBin(t testing.TB, env, script, what string) string {
	t.Helper()
	if d := os.Getenv(env); d != "" {
		return d
	}
	out, err := exec.Command("bash", script).Output()
	if err != nil {
		t.Fatalf("e2e/%s (%s): %v", script, what, err)
	}
	return strings.TrimSpace(string(out))
}

// k8sBin builds (or finds cached) the control-plane binaries.
func k8sBin(t testing.TB) string {
	t.Helper()
	return toolsBin(t, "MESHLET_K8S_BIN", "tools.sh", "builds etcd, the Kubernetes binaries and SPIRE; ~20 min cold")
}

// StartCluster starts etcd, kube-apiserver and kube-controller-manager and
// waits until the default ServiceAccount exists (pods are refused before).
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterOptions{})
}

// StartClusterWith is StartCluster with options.
func StartClusterWith(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	c := &Cluster{Dir: t.TempDir(), Bin: k8sBin(t), logs: map[string]*bytes.Buffer{}, nodes: o.Nodes}
	apiHost, apiExtra, controllers := "127.0.0.1", []string{"--endpoint-reconciler-type=none"}, ""
	if o.Nodes {
		if os.Geteuid() != 0 {
			t.Fatal("real nodes build a bridge, routes and rules on the host: the test needs root (CI runs as root)")
		}
		// The nodes' bridge before the API server, which listens on it;
		// undone after every process has stopped (cleanups run last
		// first).
		c.hostNet = &hostNet{bridge: fmt.Sprintf("mltn%d", os.Getpid()%100000), guard: fmt.Sprintf("meshlet-test-%d", os.Getpid())}
		t.Cleanup(c.hostNet.down)
		c.hostNet.up(t)
		// The kubernetes Service's endpoint is kept by the API server's
		// lease reconciler, as in any cluster; webhooks are called at
		// their Service's ClusterIP, which kube-proxy translates.
		apiHost, apiExtra = ControlPlaneIP, []string{"--kubelet-preferred-address-types=InternalIP"}
		controllers = ",node-lifecycle-controller,pod-garbage-collector-controller,job-controller,endpoints-controller"
	}
	t.Cleanup(c.stop)
	c.pki(t)
	etcdPort, peerPort, apiPort := freePort(t), freePort(t), freePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	c.start(t, "etcd", "--data-dir="+filepath.Join(c.Dir, "etcd"), "--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", peerPort), fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", peerPort),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", peerPort), "--unsafe-no-fsync=true", "--log-level=warn")
	p := func(n string) string { return filepath.Join(c.Dir, n) }
	c.start(t, "kube-apiserver", append([]string{"--etcd-servers=" + etcdURL, "--bind-address=" + apiHost, fmt.Sprintf("--secure-port=%d", apiPort),
		"--advertise-address=" + apiHost,
		"--tls-cert-file=" + p("apiserver.crt"), "--tls-private-key-file=" + p("apiserver.key"), "--client-ca-file=" + p("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local", "--service-account-key-file=" + p("sa.pub"),
		"--service-account-signing-key-file=" + p("sa.key"), "--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=ServiceAccount,MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
		"--allow-privileged=true", "--cert-dir=" + p("apiserver-certs")}, apiExtra...)...)
	c.writeKubeconfig(t, net.JoinHostPort(apiHost, fmt.Sprint(apiPort)))
	c.waitAPI(t)
	c.start(t, "kube-controller-manager", "--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--use-service-account-credentials=true",
		"--service-account-private-key-file="+p("sa.key"), "--root-ca-file="+p("ca.crt"), "--bind-address=127.0.0.1", "--secure-port=0",
		"--controllers=endpointslice-controller,endpointslice-mirroring-controller,serviceaccount-controller,serviceaccount-token-controller,namespace-controller,garbage-collector-controller,deployment-controller,replicaset-controller,root-ca-certificate-publisher-controller"+controllers)
	c.waitDefaultSA(t, "default")
	return c
}

func (c *Cluster) start(t testing.TB, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.Bin, name), args...)
	buf := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	c.procs = append(c.procs, cmd)
	c.logs[name] = buf
}

func (c *Cluster) stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].Process.Kill()
		c.procs[i].Wait()
	}
}

// Log returns a component's output (for failure messages).
func (c *Cluster) Log(name string) string {
	if b := c.logs[name]; b != nil {
		s := b.String()
		if len(s) > 4000 {
			s = s[len(s)-4000:]
		}
		return s
	}
	return ""
}

func (c *Cluster) waitAPI(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := c.Client.Discovery().ServerVersion(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not up:\n%s", c.Log("kube-apiserver"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *Cluster) waitDefaultSA(t testing.TB, ns string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := c.Client.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metaGet); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no default ServiceAccount in %s:\n%s", ns, c.Log("kube-controller-manager"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Kubectl runs the built kubectl against the cluster.
func (c *Cluster) Kubectl(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// pki writes a CA, the API server's serving certificate, an admin client
// certificate and the ServiceAccount signing keys.
func (c *Cluster) pki(t testing.TB) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "meshlet-e2e-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	c.CA, _ = x509.ParseCertificate(caDER)
	c.caKey = caKey
	writePEM(t, filepath.Join(c.Dir, "ca.crt"), "CERTIFICATE", caDER)
	c.issue(t, "apiserver", pkix.Name{CommonName: "kube-apiserver"}, []string{"localhost", "kubernetes.default.svc"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1"), net.ParseIP(ControlPlaneIP)}, x509.ExtKeyUsageServerAuth)
	c.issue(t, "admin", pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, nil, nil, x509.ExtKeyUsageClientAuth)
	sa, _ := rsa.GenerateKey(rand.Reader, 2048)
	writePEM(t, filepath.Join(c.Dir, "sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(sa))
	pub, _ := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	writePEM(t, filepath.Join(c.Dir, "sa.pub"), "PUBLIC KEY", pub)
}

// Issue signs a certificate from the cluster CA and writes name.crt and
// name.key; it returns the paths.
func (c *Cluster) issue(t testing.TB, name string, subj pkix.Name, dns []string, ips []net.IP, usage x509.ExtKeyUsage) (string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: subj, DNSNames: dns, IPAddresses: ips,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.CA, &key.PublicKey, c.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	crt, k := filepath.Join(c.Dir, name+".crt"), filepath.Join(c.Dir, name+".key")
	writePEM(t, crt, "CERTIFICATE", der)
	writePEM(t, k, "EC PRIVATE KEY", kd)
	return crt, k
}

// ServingCert issues a serving certificate for 127.0.0.1 (webhooks).
func (c *Cluster) ServingCert(t testing.TB, name string) (certFile, keyFile string) {
	return c.issue(t, name, pkix.Name{CommonName: name}, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
}

// CAPEM is the cluster CA certificate in PEM.
func (c *Cluster) CAPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.CA.Raw})
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) writeKubeconfig(t testing.TB, hostPort string) {
	t.Helper()
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	c.writeKubeconfigFor(t, c.Kubeconfig, "https://"+hostPort, filepath.Join(c.Dir, "admin.crt"), filepath.Join(c.Dir, "admin.key"))
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c.Config = cfg
	c.Client = kubernetes.NewForConfigOrDie(cfg)
}

// writeKubeconfigFor writes to path a kubeconfig for the API server at
// server (an https URL) with the cluster CA and the client certificate
// crt / key.
func (c *Cluster) writeKubeconfigFor(t testing.TB, path, server, crt, key string) {
	t.Helper()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: user, user: {client-certificate: %q, client-key: %q}}]
contexts: [{name: e2e, context: {cluster: e2e, user: user}}]
current-context: e2e
`, server, filepath.Join(c.Dir, "ca.crt"), crt, key)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
}
