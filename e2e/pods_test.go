//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cgroup2Root is where the cgroup v2 hierarchy is mounted.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("findmnt", "-n", "-t", "cgroup2", "-o", "TARGET").Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		t.Fatalf("no cgroup2 mount (findmnt -t cgroup2): %v", err)
	}
	return strings.Fields(string(out))[0]
}

// fixturePod is a pod without a kubelet: a network namespace (on a veth to
// the other pod, no route elsewhere) and a pod cgroup with proxy and app
// children.
type fixturePod struct {
	ns, ip, cgroup string
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}

// start runs argv in the background in the pod's network namespace and
// cgroup child (proxy or app); run waits for it and returns its output.
func (p fixturePod) start(t *testing.T, name, child string, argv ...string) *proc {
	t.Helper()
	script := fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec "$@"`, filepath.Join(p.cgroup, child))
	return startProc(t, name, "nsenter", append([]string{"--net=/var/run/netns/" + p.ns, "sh", "-c", script, "sh"}, argv...)...)
}

func (p fixturePod) run(t *testing.T, child string, argv ...string) (string, error) {
	t.Helper()
	script := fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec "$@"`, filepath.Join(p.cgroup, child))
	out, err := exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + p.ns, "sh", "-c", script, "sh"}, argv...)...).CombinedOutput()
	return string(out), err
}

// TestTwoPodsEBPFAndMutualTLS is the whole traffic path of the design on
// the real kernel, with no kubelet: pod A's app dials a Service VIP;
// cgroup/connect4 sends it to A's sidecar, which picks pod B's endpoint and
// dials it with mutual TLS (SVIDs from a real SPIRE agent over SDS); in pod
// B, sk_lookup hands the connection for 10.98.0.2:8080 to B's inbound
// listener, which terminates mTLS, authorizes the peer, learns port 8080
// from the socket and forwards to B's app on loopback. Both sidecars log
// the peer's SPIFFE ID.
func TestTwoPodsEBPFAndMutualTLS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test loads eBPF programs and builds cgroups and network namespaces: it needs root (CI runs as root)")
	}
	for _, tool := range []string{"ip", "nsenter", "curl", "findmnt"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed: %v", tool, err)
		}
	}
	sidecar, err := sidecarBin()
	if err != nil {
		t.Fatal(err)
	}
	sp := startSPIRE(t, time.Hour)
	// The sidecars dial the agent after switching to uid 1337: the agent
	// attests that uid.
	sp.cli(t, "spire-server", "entry", "create", "-socketPath", sp.serverSock, "-parentID", "spiffe://example.org/agent",
		"-spiffeID", "spiffe://example.org/ns/shop/sa/web", "-selector", "unix:uid:1337")
	root := cgroup2Root(t)
	pid := os.Getpid()
	pods := map[string]*fixturePod{}
	for _, name := range []string{"a", "b"} {
		p := &fixturePod{ns: fmt.Sprintf("meshlet-test-%d-pod%s", pid, name), cgroup: filepath.Join(root, fmt.Sprintf("meshlet-test-%d-pod%s", pid, name))}
		ipCmd(t, "netns", "add", p.ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.ns).Run() })
		ipCmd(t, "-n", p.ns, "link", "set", "lo", "up")
		for _, d := range []string{p.cgroup, p.cgroup + "/proxy", p.cgroup + "/app"} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			// Processes are killed by their own cleanups (registered later,
			// run earlier); the cgroups go once empty.
			for _, d := range []string{p.cgroup + "/app", p.cgroup + "/proxy", p.cgroup} {
				for i := 0; i < 50 && os.Remove(d) != nil; i++ {
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
		pods[name] = p
	}
	a, b := pods["a"], pods["b"]
	a.ip, b.ip = "10.98.0.1", "10.98.0.2"
	veth := fmt.Sprintf("mt%dv", pid%100000)
	ipCmd(t, "link", "add", veth+"a", "type", "veth", "peer", "name", veth+"b")
	ipCmd(t, "link", "set", veth+"a", "netns", a.ns)
	ipCmd(t, "link", "set", veth+"b", "netns", b.ns)
	for _, p := range []struct {
		pod *fixturePod
		dev string
	}{{a, veth + "a"}, {b, veth + "b"}} {
		ipCmd(t, "-n", p.pod.ns, "addr", "add", p.pod.ip+"/24", "dev", p.dev)
		ipCmd(t, "-n", p.pod.ns, "link", "set", p.dev, "up")
	}

	dir := t.TempDir()
	// Pod B: its app on :8080, its sidecar with STRICT inbound.
	b.start(t, "app-b", "app", fortioBin(t), "server", "-http-port", "0.0.0.0:8080", "-grpc-port", "disabled",
		"-redirect-port", "disabled", "-tcp-port", "disabled", "-udp-port", "disabled")
	bLog := filepath.Join(dir, "b-access.log")
	bCfg := writeFile(t, dir, "b.yaml", fmt.Sprintf(`node: {id: web-0.shop, cluster: web}
admin: 127.0.0.1:15000
health: 127.0.0.1:15021
prometheus: ""
access_log: {path: %s, flush_interval: 50ms}
listeners:
  - {name: outbound, address: "127.0.0.1:15001"}
  - {name: inbound, address: "0.0.0.0:15006", direction: inbound,
     mtls: {mode: STRICT, trust_domains: [example.org]},
     routes: [{name: app, match: {destination: ":8080"}, cluster: app}]}
clusters:
  - {name: app, type: STATIC, connect_timeout: 1s, load_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8080}}}}]}]}}
`, bLog))
	sidecarB := b.start(t, "sidecar-b", "proxy", sidecar, "run", "-config", bCfg, "-watch", "0", "-redirect", "ebpf", "-sds", "unix://"+sp.agentSock)
	// Pod A: its sidecar routes the VIP to pod B's endpoint over mTLS.
	aLog := filepath.Join(dir, "a-access.log")
	aCfg := writeFile(t, dir, "a.yaml", fmt.Sprintf(`node: {id: client-0.shop, cluster: client}
admin: 127.0.0.1:15000
health: 127.0.0.1:15021
prometheus: ""
access_log: {path: %s, flush_interval: 50ms}
listeners:
  - {name: outbound, address: "127.0.0.1:15001", routes: [{name: web, match: {destination: "10.96.0.50:80"}, cluster: web}]}
clusters:
  - {name: web, type: STATIC, connect_timeout: 1s, load_assignment: {endpoints: [{lb_endpoints: [
      {endpoint: {address: {socket_address: {address: %s, port_value: 8080}}},
       metadata: {filter_metadata: {meshlet.io: {meshed: true, identity: "spiffe://example.org/ns/shop/sa/web"}}}}]}]}}
`, aLog, b.ip))
	sidecarA := a.start(t, "sidecar-a", "proxy", sidecar, "run", "-config", aCfg, "-watch", "0", "-redirect", "ebpf", "-sds", "unix://"+sp.agentSock)
	for _, p := range []*fixturePod{a, b} {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
			out, err := p.run(t, "app", "curl", "-fsS", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:15021/healthz/ready")
			if err == nil && out == "200" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sidecar of pod %s never became ready: %v %s", p.ns, err, out)
			}
		}
	}
	// Both sidecars attached as root and now serve as 1337:1337 with no
	// capability left on any thread.
	for _, sc := range []*proc{sidecarA, sidecarB} {
		if err := unprivileged(sc.cmd.Process.Pid, 1337); err != nil {
			t.Errorf("%s: %v\n%s", sc.name, err, sc.out.String())
		} else {
			t.Logf("%s (pid %d): every thread 1337:1337, no capabilities", sc.name, sc.cmd.Process.Pid)
		}
	}
	// A's app dials the VIP: there is no route to it, only the redirect.
	out, err := a.run(t, "app", "curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "http://10.96.0.50/echo?size=64")
	if err != nil || out != "200" {
		t.Fatalf("pod A's app through both sidecars: %v %q", err, out)
	}
	// B's app reached straight, without mTLS, is refused by STRICT: the
	// connection for 10.98.0.2:8080 from pod A's sidecar-less curl goes to
	// B's sidecar (sk_lookup), not to the app. (curl runs in A's proxy
	// cgroup, so A's redirect leaves it alone.)
	out, err = a.run(t, "proxy", "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", "http://10.98.0.2:8080/")
	if err == nil && out == "200" {
		t.Errorf("a plaintext request to pod B's app port got through: STRICT and sk_lookup did not hold")
	}
	wait := func(path string, parts ...string) string {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			b, _ := os.ReadFile(path)
			for _, line := range strings.Split(string(b), "\n") {
				ok := true
				for _, p := range parts {
					ok = ok && strings.Contains(line, p)
				}
				if ok {
					return line
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s has no line with %q:\n%s", path, parts, b)
			}
		}
	}
	t.Logf("A: %s", wait(aLog, `"GET /echo?size=64 HTTP/1.1" 200`, b.ip+":8080", "spiffe://example.org/ns/shop/sa/web"))
	t.Logf("B: %s", wait(bLog, `"GET /echo?size=64 HTTP/2.0" 200`, " app ", "spiffe://example.org/ns/shop/sa/web"))
	t.Logf("B refused: %s", wait(bLog, "filter_chain_not_found"))
}

// unprivileged checks that every thread of pid runs as uid:uid (real,
// effective, saved and filesystem ids) with empty permitted, effective and
// ambient capability sets.
func unprivileged(pid, uid int) error {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		return fmt.Errorf("no threads for pid %d: %v", pid, err)
	}
	want := fmt.Sprint(uid)
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // a thread that exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			f := strings.Fields(v)
			switch k {
			case "Uid", "Gid":
				for _, id := range f {
					if id != want {
						return fmt.Errorf("%s: %s %v, want %s", path, k, f, want)
					}
				}
			case "CapPrm", "CapEff", "CapAmb":
				if len(f) != 1 || strings.Trim(f[0], "0") != "" {
					return fmt.Errorf("%s: %s %v, want none", path, k, f)
				}
			}
		}
	}
	return nil
}
