//go:build e2e

package e2e

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The cluster's Service network on real nodes: the real kube-proxy and
// the real CoreDNS, as a cluster runs them, on the host (every node's
// network namespace here).

// clientKubeconfig writes a kubeconfig for a client certificate of the
// cluster CA named by subj and returns its path.
func (c *Cluster) clientKubeconfig(t *testing.T, name string, subj pkix.Name) string {
	t.Helper()
	crt, key := c.issue(t, name, subj, nil, nil, x509.ExtKeyUsageClientAuth)
	path := filepath.Join(c.Dir, name+".kubeconfig")
	c.writeKubeconfigFor(t, path, c.Config.Host, crt, key)
	return path
}

// waitHTTP waits until url answers 200, failing the test with what log
// returns after timeout.
func waitHTTP(t *testing.T, url string, timeout time.Duration, what string, log func() string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not answer 200 in %s:\n%s", what, url, timeout, log())
		}
	}
}

// startKubeProxy runs kube-proxy v1.37 in nftables mode for the nodes: one
// process, as node, since every node shares the host's network namespace
// (one per node would fight over the same tables). It authenticates as
// system:kube-proxy (the API server's bootstrap RBAC binds it to
// system:node-proxier), translates every ClusterIP to its EndpointSlices'
// addresses, masquerades what comes from outside the pod range, and leaves
// the host's conntrack sysctls alone. It returns once kube-proxy reports
// healthy (its rules written) with the kubernetes Service in its table.
func (c *Cluster) startKubeProxy(t *testing.T, bin string, node *Node) {
	t.Helper()
	kc := c.clientKubeconfig(t, "kube-proxy", pkix.Name{CommonName: "system:kube-proxy"})
	health, metrics := freePort(t), freePort(t)
	cfg := filepath.Join(c.Dir, "kube-proxy.yaml")
	writeFile(t, c.Dir, "kube-proxy.yaml", fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: %q}
hostnameOverride: %s
clusterCIDR: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
nodePortAddresses: [%s/32]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, kc, node.Name, podRange, health, metrics, node.IP))
	c.startIn(t, bin, "kube-proxy", "--config="+cfg, "--v=1")
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/healthz", health), 60*time.Second, "kube-proxy", func() string { return c.Log("kube-proxy") })
	// The kubernetes Service (10.0.0.1) in kube-proxy's table.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := exec.Command("nft", "list", "table", "ip", "kube-proxy").CombinedOutput()
		if err == nil && strings.Contains(string(out), "10.0.0.1 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy wrote no rule for the kubernetes Service (10.0.0.1): %v\n%s\nkube-proxy log:\n%s", err, tail(string(out), 2000), c.Log("kube-proxy"))
		}
	}
	t.Logf("kube-proxy (nftables mode, as %s) healthy", node.Name)
}

// startClusterDNS runs CoreDNS v1.14 (e2e/tools/coredns: the kubernetes
// plugin and the usual ones of a cluster's Corefile) on ControlPlaneIP:53
// and the kube-system/kube-dns Service at ClusterDNSIP, whose
// EndpointSlice is that address (CoreDNS runs on the host beside the API
// server, not as a pod: the tools are built with cgo for SPIRE and run on
// the host). It answers for cluster.local and the reverse zones and
// forwards nothing. It returns once CoreDNS is ready and a query through
// the ClusterIP (kube-proxy's translation) resolves the kubernetes
// Service.
func (c *Cluster) startClusterDNS(t *testing.T, bin string) {
	t.Helper()
	ctx := context.Background()
	health, ready := freePort(t), freePort(t)
	corefile := fmt.Sprintf(`.:53 {
    bind %s
    errors
    log
    health 127.0.0.1:%d
    ready 127.0.0.1:%d
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s e2e
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
    loadbalance
}
`, ControlPlaneIP, health, ready, c.Kubeconfig)
	writeFile(t, c.Dir, "Corefile", corefile)
	c.startIn(t, bin, "coredns", "-conf", filepath.Join(c.Dir, "Corefile"))
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/ready", ready), 60*time.Second, "CoreDNS", func() string { return c.Log("coredns") })

	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	if _, err := c.Client.CoreV1().Services("kube-system").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{ClusterIP: ClusterDNSIP, Ports: []corev1.ServicePort{
			{Name: "dns", Protocol: udp, Port: 53, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Protocol: tcp, Port: 53, TargetPort: intstr.FromInt32(53)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kube-dns Service: %v", err)
	}
	ready53, port53 := true, int32(53)
	dns, dnsTCP := "dns", "dns-tcp"
	if _, err := c.Client.DiscoveryV1().EndpointSlices("kube-system").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-host", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kube-dns", discoveryv1.LabelManagedBy: "e2e.meshlet.dev"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ControlPlaneIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready53}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &dns, Protocol: &udp, Port: &port53}, {Name: &dnsTCP, Protocol: &tcp, Port: &port53}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kube-dns EndpointSlice: %v", err)
	}
	// A query from the host to the ClusterIP, as a pod's resolver sends it.
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(ClusterDNSIP, "53"))
	}}
	var addrs []string
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		addrs, err = r.LookupHost(qctx, "kubernetes.default.svc.cluster.local")
		cancel()
		if err == nil && len(addrs) == 1 && addrs[0] == "10.0.0.1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubernetes.default.svc.cluster.local through %s: %v %v\nCoreDNS log:\n%s\nkube-proxy log:\n%s", ClusterDNSIP, addrs, err, c.Log("coredns"), c.Log("kube-proxy"))
		}
	}
	t.Logf("CoreDNS ready; kubernetes.default.svc.cluster.local through %s: %v", ClusterDNSIP, addrs)
}

// conntrackEntries lists the host's conntrack entries for TCP from src to
// dst:port (conntrack -L): connections that passed kube-proxy's rules.
func conntrackEntries(t *testing.T, src, dst string, port int) []string {
	t.Helper()
	out, err := exec.Command("conntrack", "-L", "-p", "tcp", "-s", src, "-d", dst, "--dport", fmt.Sprint(port)).Output()
	if err != nil {
		t.Fatalf("conntrack -L -s %s -d %s --dport %d: %v", src, dst, port, err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
