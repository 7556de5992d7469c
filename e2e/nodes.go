//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Real nodes (see docs/testing.md): each node is a
// containerd (Debian's 1.6, runc) and a kubelet v1.37 on this machine, with
// its own root and state folders, CNI bridge and pod range, cgroup root,
// node IP and zone label. The images are built from this tree
// (internal/images, as make images builds them) and pushed to a real OCI
// registry in the test process on loopback (registry.go), which every
// node's containerd is configured to reach over plain HTTP; pods name them
// by digest, so the kubelets pull exactly what was pushed, and nothing from
// off the machine. It also stands in for registry.k8s.io
// (mirroredRegistries), for manifests that name upstream images, such as
// the Gateway API conformance suite's. The host's network namespace is
// every node's, so one kube-proxy (nftables mode, as node-a) translates
// ClusterIPs for all of them, and CoreDNS on ControlPlaneIP answers for
// the cluster domain behind the kube-dns Service (StartNodes). Traffic
// stays on the machine: node IPs sit on a port-less bridge, pods reach each other through the host's connected
// routes, the Service range is routed onto that port-less bridge (a
// ClusterIP kube-proxy did not translate goes nowhere), two FORWARD rules
// drop anything leaving or entering the pod ranges from elsewhere, and
// CoreDNS forwards nothing: a name outside the cluster gets no answer.

// Node is one running kubelet and its containerd.
type Node struct {
	Name, Zone string
	// IP is the node's InternalIP (on the nodes bridge).
	IP string
	// Subnet is the node's pod range; Bridge its CNI bridge.
	Subnet, Bridge string
	Dir, Socket    string
	// CgroupRoot is the kubelet's cgroupRoot (pods are below it in every
	// cgroup hierarchy).
	CgroupRoot string
	procs      []*exec.Cmd
	done       []chan struct{}
	names      []string
}

// ControlPlaneIP is the host's address on the nodes' bridge: the API
// server and CoreDNS listen there (pods reach them through the kubernetes
// and kube-dns Services).
const ControlPlaneIP = "10.250.0.1"

// ClusterDNSIP is the kube-dns Service's ClusterIP, the nameserver the
// kubelets give pods.
const ClusterDNSIP = "10.0.0.10"

// podRange and serviceRange are the pod networks and the API server's
// Service range (see StartCluster).
const (
	podRange     = "10.244.0.0/16"
	serviceRange = "10.0.0.0/24"
)

// nodeBin builds (or finds cached) kubelet, kube-scheduler, kube-proxy and
// CoreDNS, and installs containerd, runc, the CNI plugins and nftables if
// missing.
func nodeBin(t *testing.T) string {
	t.Helper()
	return toolsBin(t, "MESHLET_NODE_BIN", "tools.sh", "builds etcd, the Kubernetes binaries, CoreDNS and SPIRE; installs containerd, runc, CNI plugins, nftables from apt")
}

// run runs a command and fails the test with its output if it fails.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// StartNodes starts one node per zone (node-a, node-b, ... in zone-a, ...
// or the zones given), the scheduler, and waits until every node is Ready;
// then kube-proxy and cluster DNS (startKubeProxy, startClusterDNS).
// Before the nodes it starts the suite's image registry and builds and
// pushes the images they pull (c.Images, registry.go).
// The cluster must have been started with ClusterOptions{Nodes: true}.
// Everything is torn down at the end of the test: pods deleted, kubelets and
// containerds stopped, mounts, cgroups, bridges, kube-proxy's tables, rules,
// routes and sysctls undone.
func (c *Cluster) StartNodes(t *testing.T, zones ...string) []*Node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("real nodes run containerd, runc and kubelets and build bridges: the test needs root (CI runs as root)")
	}
	if !c.nodes {
		t.Fatal("StartNodes: the cluster was not started with ClusterOptions{Nodes: true}")
	}
	bin := nodeBin(t)
	for _, tool := range []string{"containerd", "ctr", "runc", "iptables", "nft", "conntrack", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed for real nodes (e2e/tools.sh installs it): %v", tool, err)
		}
	}
	// The registry stops after the nodes (cleanups run last first).
	c.registry = startRegistry(t)
	built := time.Now()
	c.Images = c.registry.buildImages(t)
	t.Logf("images built and pushed to %s in %.1f s: %+v", c.registry.Host, time.Since(built).Seconds(), c.Images)
	tag := fmt.Sprint(os.Getpid() % 100000)
	hn := c.hostNet
	var nodes []*Node
	c.kubeletDirMade = !fileExists(kubeletFixedDir)
	t.Cleanup(func() { c.stopNodes(t, nodes) })

	// The scheduler, with the admin credentials.
	c.startIn(t, bin, "kube-scheduler", "--kubeconfig="+c.Kubeconfig, "--authentication-kubeconfig="+c.Kubeconfig,
		"--authorization-kubeconfig="+c.Kubeconfig, "--authentication-tolerate-lookup-failure", "--bind-address=127.0.0.1",
		"--secure-port=0", "--leader-elect=false", "--v=1")

	for i, zone := range zones {
		letter := string(rune('a' + i))
		// Not below c.Dir, which is named after the test: the sockets
		// containerd and the kubelet make in their folders
		// (containerd.sock.ttrpc, kubelet/root/pod-resources/NNN) must fit
		// in a socket address's 104 bytes, also for a long test name.
		// n.stop removes it.
		dir, err := os.MkdirTemp("", "node-"+letter+"-")
		if err != nil {
			t.Fatalf("node-%s: %v", letter, err)
		}
		n := &Node{
			Name: "node-" + letter, Zone: zone, IP: fmt.Sprintf("10.250.0.%d", 11+i),
			Subnet: fmt.Sprintf("10.244.%d.0/24", i+1), Bridge: "mltb" + tag + letter,
			Dir:        dir,
			CgroupRoot: fmt.Sprintf("/meshlet-test-%d-node-%s", os.Getpid(), letter),
		}
		nodes = append(nodes, n)
		run(t, "ip", "addr", "add", n.IP+"/32", "dev", hn.bridge)
		c.startNode(t, bin, n)
	}
	ctx := context.Background()
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		ready := 0
		for _, n := range nodes {
			if name := n.exited(); name != "" {
				t.Fatalf("%s: %s exited:\n%s", n.Name, name, n.Log(name))
			}
			node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && len(node.Spec.Taints) == 0 {
					ready++
				}
			}
		}
		if ready == len(nodes) {
			c.startKubeProxy(t, bin, nodes[0])
			c.startClusterDNS(t, bin)
			return nodes
		}
		if time.Now().After(deadline) {
			for _, n := range nodes {
				t.Logf("%s kubelet log (tail):\n%s", n.Name, tailFile(filepath.Join(n.Dir, "kubelet.log"), 3000))
			}
			t.Fatalf("only %d of %d nodes Ready without taints after 120 s", ready, len(nodes))
		}
	}
}

// startIn starts a binary from dir as a control-plane process.
func (c *Cluster) startIn(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	bin := c.Bin
	c.Bin = dir
	defer func() { c.Bin = bin }()
	c.start(t, name, args...)
}

func (c *Cluster) startNode(t *testing.T, bin string, n *Node) {
	t.Helper()
	p := func(parts ...string) string { return filepath.Join(append([]string{n.Dir}, parts...)...) }
	for _, d := range []string{"containerd/root", "containerd/state", "containerd/runc", "cni/net.d", "cni/ipam",
		"kubelet/root", "kubelet/pki", "kubelet/volume-plugins", "pod-logs"} {
		if err := os.MkdirAll(p(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.Socket = p("containerd", "containerd.sock")
	cniBin := "/usr/lib/cni"
	writeFile(t, n.Dir, "containerd.toml", fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = true
  # this machine's root lacks CAP_SYS_RESOURCE: a negative oom_score_adj fails
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".registry]
    # a hosts.toml per registry host: the suite's registry over plain
    # HTTP, and the registries it mirrors (mirroredRegistries)
    config_path = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
`, p("containerd", "root"), p("containerd", "state"), n.Socket, c.Images.Pause, cniBin, p("cni", "net.d"), p("containerd", "certs.d"), p("containerd", "runc")))
	c.registry.writeHostsTOML(t, p("containerd", "certs.d"))
	c.registry.writeMirrorHostsTOML(t, p("containerd", "certs.d"))
	gw := strings.TrimSuffix(n.Subnet, "0/24") + "1"
	writeFile(t, p("cni", "net.d"), "10-meshlet-e2e.conflist", fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "meshlet-e2e-%s",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`, n.Name, n.Bridge, p("cni", "ipam"), n.Subnet, gw))
	n.start(t, "containerd", "containerd", "--config", p("containerd.toml"))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if exec.Command("ctr", "-a", n.Socket, "version").Run() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: containerd never answered:\n%s", n.Name, tailFile(p("containerd.log"), 3000))
		}
	}
	crt, key := c.issue(t, n.Name, pkix.Name{CommonName: "system:node:" + n.Name, Organization: []string{"system:nodes"}}, nil, nil, x509.ExtKeyUsageClientAuth)
	kc := strings.NewReplacer(filepath.Join(c.Dir, "admin.crt"), crt, filepath.Join(c.Dir, "admin.key"), key)
	b, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, p("kubelet"), "kubeconfig", kc.Replace(string(b)))
	writeFile(t, p("kubelet"), "config.yaml", fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
containerRuntimeEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: %s
healthzPort: 10248
podLogsDir: %s
resolvConf: ""
clusterDomain: cluster.local
clusterDNS: [%s]
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
makeIPTablesUtilChains: false
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
nodeStatusUpdateFrequency: 5s
maxPods: 50
volumePluginDir: %s
`, n.CgroupRoot, n.Socket, n.IP, n.IP, p("pod-logs"), ClusterDNSIP, filepath.Join(c.Dir, "ca.crt"), p("kubelet", "volume-plugins")))
	// The kubelet wants its cgroup root in every hierarchy; a v1 cpuset
	// starts empty and takes its parent's CPUs and memory nodes.
	for _, mnt := range cgroupMounts() {
		d := filepath.Join(mnt, n.CgroupRoot)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("%s: cgroup root: %v", n.Name, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(mnt, f)); err == nil && fileExists(filepath.Join(d, f)) {
				_ = os.WriteFile(filepath.Join(d, f), v, 0o644)
			}
		}
	}
	n.start(t, "kubelet", filepath.Join(bin, "kubelet"), "--config="+p("kubelet", "config.yaml"), "--kubeconfig="+p("kubelet", "kubeconfig"),
		"--root-dir="+p("kubelet", "root"), "--cert-dir="+p("kubelet", "pki"), "--hostname-override="+n.Name, "--node-ip="+n.IP,
		"--node-labels=topology.kubernetes.io/zone="+n.Zone+",topology.kubernetes.io/region=local", "--v=2")
}

// start runs a node process with its output in <node>/<name>.log.
func (n *Node) start(t *testing.T, name, path string, args ...string) {
	t.Helper()
	f, err := os.Create(filepath.Join(n.Dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// containerd finds its shim on PATH.
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: start %s: %v", n.Name, name, err)
	}
	f.Close()
	n.procs = append(n.procs, cmd)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	n.done = append(n.done, done)
	n.names = append(n.names, name)
}

// exited names a node process that has ended, or "".
func (n *Node) exited() string {
	for i, d := range n.done {
		select {
		case <-d:
			return n.names[i]
		default:
		}
	}
	return ""
}

// Log returns the tail of a node process's log.
func (n *Node) Log(name string) string { return tailFile(filepath.Join(n.Dir, name+".log"), 4000) }

// tailFile is the end of a file.
func tailFile(path string, max int) string {
	b, _ := os.ReadFile(path)
	return tail(string(b), max)
}

// hostNet is the host side of the nodes' networking (built by
// StartClusterWith, before the API server that listens on it).
type hostNet struct {
	bridge, guard string
	// sysctls holds the values of the sysctls the nodes, kube-proxy and
	// containerd may change, to be put back.
	sysctls map[string]string
	rules   [][]string
	route   bool
	// filterTable: iptables (nft backend) created `table ip filter` for
	// the rules; it is deleted with them.
	filterTable bool
}

// hostSysctls are the sysctls hostNet saves and restores: IP forwarding,
// bridged traffic through netfilter (kube-proxy's translation of a
// ClusterIP whose endpoint is on the caller's own bridge needs its reply
// to pass conntrack) and what kube-proxy may tune.
var hostSysctls = []string{
	"net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables",
	"net/ipv4/conf/all/route_localnet", "net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established", "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
}

func (h *hostNet) up(t testing.TB) {
	t.Helper()
	h.sysctls = map[string]string{}
	for _, k := range hostSysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			h.sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	if _, ok := h.sysctls["net/bridge/bridge-nf-call-iptables"]; !ok {
		t.Fatal("real nodes need bridged traffic through netfilter (kube-proxy): the kernel has no br_netfilter (/proc/sys/net/bridge/bridge-nf-call-iptables)")
	}
	if err := os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "ip", "link", "add", h.bridge, "type", "bridge")
	run(t, "ip", "link", "set", h.bridge, "up")
	run(t, "ip", "addr", "add", ControlPlaneIP+"/32", "dev", h.bridge)
	// The Service range onto the port-less bridge: a ClusterIP that
	// kube-proxy did not translate (and that the redirect did not take)
	// goes nowhere. Not a blackhole route: the host's own connections to
	// ClusterIPs (the API server calling a webhook's Service) must pass the
	// route lookup that comes before kube-proxy's output rules.
	run(t, "ip", "route", "add", serviceRange, "dev", h.bridge)
	h.route = true
	h.filterTable = exec.Command("nft", "list", "table", "ip", "filter").Run() != nil
	for _, r := range [][]string{
		{"FORWARD", "-s", podRange, "!", "-d", podRange, "-m", "comment", "--comment", h.guard, "-j", "DROP"},
		{"FORWARD", "-d", podRange, "!", "-s", podRange, "-m", "comment", "--comment", h.guard, "-j", "DROP"},
	} {
		run(t, "iptables", append([]string{"-I"}, r...)...)
		h.rules = append(h.rules, r)
	}
}

func (h *hostNet) down() {
	for _, r := range h.rules {
		_ = exec.Command("iptables", append([]string{"-D"}, r...)...).Run()
	}
	if h.filterTable && len(h.rules) > 0 {
		_ = exec.Command("nft", "delete", "table", "ip", "filter").Run()
	}
	// kube-proxy's tables (it has stopped: cleanups run last first).
	for _, family := range []string{"ip", "ip6"} {
		_ = exec.Command("nft", "delete", "table", family, "kube-proxy").Run()
	}
	if h.route {
		_ = exec.Command("ip", "route", "del", serviceRange, "dev", h.bridge).Run()
	}
	_ = exec.Command("ip", "link", "del", h.bridge).Run()
	for k, v := range h.sysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil && strings.TrimSpace(string(b)) != v {
			_ = os.WriteFile("/proc/sys/"+k, []byte(v), 0o644)
		}
	}
}

// stopNodes tears the nodes down (see StartNodes).
func (c *Cluster) stopNodes(t *testing.T, nodes []*Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	// Pods first, while the kubelets run: they stop the containers and
	// call CNI DEL for each sandbox.
	grace := int64(1)
	if nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		for _, ns := range nss.Items {
			// Controllers first, or they make new pods.
			_ = c.Client.BatchV1().Jobs(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			_ = c.Client.AppsV1().Deployments(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			_ = c.Client.AppsV1().ReplicaSets(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			_ = c.Client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
		}
	}
	for _, n := range nodes {
		for ctx.Err() == nil {
			pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
			if err != nil || len(pods.Items) == 0 {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	for _, n := range nodes {
		n.stop(t)
	}
	// The kubelet's device-plugin socket has a fixed path, outside its
	// --root-dir; what the nodes made there goes with them.
	if c.kubeletDirMade {
		_ = os.RemoveAll(kubeletFixedDir)
	}
}

// kubeletFixedDir holds what a kubelet creates at a fixed path whatever
// its --root-dir (the device-plugin socket).
const kubeletFixedDir = "/var/lib/kubelet"

func (n *Node) stop(t *testing.T) {
	// kubelet, then containerd.
	for i := len(n.procs) - 1; i >= 0; i-- {
		_ = n.procs[i].Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done[i]:
		case <-time.After(10 * time.Second):
			_ = n.procs[i].Process.Kill()
			<-n.done[i]
		}
	}
	// Whatever still runs below the node's cgroup root (containers the
	// kubelet did not stop) and the node's shims.
	for _, mnt := range cgroupMounts() {
		if kill := filepath.Join(mnt, n.CgroupRoot, "cgroup.kill"); fileExists(kill) {
			_ = os.WriteFile(kill, []byte("1"), 0o644)
		}
	}
	_ = exec.Command("pkill", "-KILL", "-f", "containerd-shim-runc-v2 .*-address "+n.Socket).Run()
	// Mounts under the node's folder (rootfs overlays, netns, shm), the
	// deepest first.
	for _, m := range mountsUnder(n.Dir) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	// The cgroup root in every hierarchy, children first.
	for _, mnt := range cgroupMounts() {
		removeTree(filepath.Join(mnt, n.CgroupRoot))
	}
	_ = exec.Command("ip", "link", "del", n.Bridge).Run()
	// The node's folder, unless a mount is left in it (removing through
	// it would reach into what it mounts; TestMain reports it).
	if len(mountsUnder(n.Dir)) == 0 {
		_ = os.RemoveAll(n.Dir)
	}
	// libcni's result cache for this node's network.
	cached, _ := filepath.Glob("/var/lib/cni/results/meshlet-e2e-" + n.Name + "-*")
	for _, f := range cached {
		os.Remove(f)
	}
	// Symlinks the kubelet made in its compiled-in container-log folder.
	links, _ := filepath.Glob("/var/log/containers/*")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, n.Dir) {
			os.Remove(l)
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// mountPoints lists the mount points whose file system type passes keep,
// from /proc/self/mounts.
func mountPoints(keep func(point, fstype string) bool) []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 3 && keep(fs[1], fs[2]) {
			out = append(out, fs[1])
		}
	}
	return out
}

// cgroupMounts lists the mount points of every cgroup and cgroup2 file
// system.
func cgroupMounts() []string {
	return mountPoints(func(_, fstype string) bool { return fstype == "cgroup" || fstype == "cgroup2" })
}

// mountsUnder lists the mount points below dir, deepest first.
func mountsUnder(dir string) []string {
	out := mountPoints(func(point, _ string) bool { return strings.HasPrefix(point, dir+"/") })
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// removeTree removes a cgroup directory and its children (retrying while
// killed processes exit).
func removeTree(root string) {
	for i := 0; i < 50 && fileExists(root); i++ {
		var dirs []string
		_ = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for j := len(dirs) - 1; j >= 0; j-- {
			_ = syscall.Rmdir(dirs[j])
		}
		if fileExists(root) {
			time.Sleep(100 * time.Millisecond)
		}
	}
}
