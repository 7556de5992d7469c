package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/internal/privileged"
)

// The real `sidecar run -redirect=ebpf` in a pod fixture: a network
// namespace with no route out (so a VIP connect that escaped the redirect
// could go nowhere) and a pod cgroup with "proxy" and "app" children. An app
// process dials the Service VIPs 10.96.0.10:80 and [fd00:96::10]:80 (IPv6,
// through the sidecar's [::1]:15001 listener) and gets the upstream's
// answer through the sidecar, whose access log names the upstream and the
// route chosen by the original destination; the sidecar's own upstream
// connection is not redirected (it reaches the upstream, not itself).
//
// Needs root (eBPF, cgroups, netns), as CI runs it.
func TestRunWithEBPFRedirect(t *testing.T) {
	if os.Getenv("MESHLET_E2E_INNER") == "1" {
		inner(t)
		return
	}
	privileged.Root(t, "this test loads eBPF programs and builds cgroups and network namespaces")
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("iproute2 (ip) is needed for the network namespace: %v", err)
	}
	ns := fmt.Sprintf("meshlet-test-%d-sidecar", os.Getpid())
	run := func(args ...string) {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	run("netns", "add", ns)
	defer exec.Command("ip", "netns", "del", ns).Run()
	run("-n", ns, "link", "set", "lo", "up")
	// Once as deployed by default, once with the sk_msg acceleration (the
	// TCP proxy must then copy with read and write: splice would stall).
	for _, accelerate := range []string{"0", "1"} {
		t.Run("accelerate="+accelerate, func(t *testing.T) {
			cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestRunWithEBPFRedirect$", "-test.v")
			cmd.Env = append(os.Environ(), "MESHLET_E2E_INNER=1", "MESHLET_E2E_ACCELERATE="+accelerate)
			out, err := cmd.CombinedOutput()
			t.Logf("inside the pod namespace:\n%s", out)
			if err != nil || !bytes.Contains(out, []byte("--- PASS")) {
				t.Fatalf("inner run failed: %v", err)
			}
		})
	}
}

// inner runs inside the namespace: it is the sidecar's host process.
func inner(t *testing.T) {
	// `ip netns exec` runs us in a private mount namespace with a fresh
	// /sys, without the cgroup2 mount: mount the (same, global) hierarchy
	// again where we can see it.
	mnt := cgroup2Mount(t)
	if mnt == "" {
		mnt = t.TempDir()
		if err := syscall.Mount("none", mnt, "cgroup2", 0, ""); err != nil {
			t.Fatalf("mount cgroup2: %v", err)
		}
		defer syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
	// Named like a kubelet pod cgroup (…-pod<uid>), found the way an
	// injected sidecar finds it: by POD_UID under MESHLET_HOST_CGROUP.
	uid := fmt.Sprintf("e2e%d", os.Getpid())
	pod := filepath.Join(mnt, fmt.Sprintf("meshlet-test-%d-pod%s", os.Getpid(), uid))
	t.Setenv("MESHLET_HOST_CGROUP", mnt)
	t.Setenv("POD_UID", uid)
	for _, d := range []string{pod, pod + "/proxy", pod + "/app"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	orig := ownCgroupProcs(t, mnt)
	// The test process plays the sidecar: it joins the proxy cgroup before
	// creating any socket (hooks follow the cgroup a socket is made in).
	moveSelf(t, pod+"/proxy/cgroup.procs")
	defer func() {
		moveSelf(t, orig)
		for _, d := range []string{pod + "/app", pod + "/proxy", pod} {
			os.Remove(d)
		}
	}()

	upL, err := net.Listen("tcp", "127.0.0.2:8080")
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(upL, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from upstream") }))
	echoL, err := net.Listen("tcp", "127.0.0.2:7000")
	if err != nil {
		t.Fatal(err)
	}
	defer echoL.Close()
	go func() {
		for {
			c, err := echoL.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "echo: %s", line)
			}()
		}
	}()
	logPath := filepath.Join(t.TempDir(), "access.log")
	cfgPath := filepath.Join(t.TempDir(), "sidecar.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`admin: 127.0.0.1:15000
health: "off"
prometheus: "off"
access_log: {path: %q}
listeners:
  - name: outbound
    address: 127.0.0.1:15001
    routes:
      - {name: vip, match: {destination: "10.96.0.10:80"}, cluster: up}
      - {name: tcp, match: {destination: "10.96.0.10:7000"}, cluster: echo}
  - name: outbound6
    address: "[::1]:15001"
    routes:
      - {name: vip6, match: {destination: "[fd00:96::10]:80"}, cluster: up}
clusters:
  - name: up
    load_assignment:
      cluster_name: up
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.2, port_value: 8080}}}}]}]
  - name: echo
    load_assignment:
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.2, port_value: 7000}}}}]}]
`, logPath)), 0o644)
	done := make(chan error, 1)
	var out syncBuffer
	go func() {
		// -proxy-uid 0: run() shares this test process, which must stay
		// root to start the app in its cgroup (the unprivileged switch is
		// TestDropPrivileges here and the real binary in e2e's
		// TestTwoPodsEBPFAndMutualTLS).
		args := []string{"-config", cfgPath, "-redirect", "ebpf", "-watch", "0", "-log-level", "error", "-proxy-uid", "0"}
		if os.Getenv("MESHLET_E2E_ACCELERATE") == "1" {
			args = append(args, "-accelerate")
		}
		done <- run(args, &out)
	}()
	// run prints its "sidecar: N workers" line once it serves and the
	// programs have its workers' sockets (registered after Start).
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "sidecar: ") {
		select {
		case err := <-done:
			t.Fatalf("sidecar exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sidecar not up:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The app: this test binary again, started inside the app cgroup.
	dir, err := os.Open(pod + "/app")
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	app := exec.Command(os.Args[0], "-test.run=^TestRedirectApp$")
	app.Env = append(os.Environ(), "MESHLET_E2E_APP=1")
	app.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	got, err := app.CombinedOutput()
	if err != nil || strings.Count(string(got), "APP GOT: hello from upstream") != 2 || !strings.Contains(string(got), "PEER 10.96.0.10:80") ||
		!strings.Contains(string(got), "PEER [fd00:96::10]:80") || !strings.Contains(string(got), "APP GOT TCP: echo: ping") {
		t.Fatalf("the app through the sidecar: %v\n%s", err, got)
	}
	// The programs' counters are in the sidecar's metrics: the app's three
	// connects were redirected and their original destinations answered.
	resp, err := http.Get("http://127.0.0.1:15000/stats/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`meshlet_redirect_events_total{event="redirected"} 3`, `meshlet_redirect_events_total{event="orig_dst_hits"} 3`,
		`meshlet_redirect_map_capacity `} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %q:\n%s", want, grepMetric(string(metrics), "meshlet_redirect"))
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	logb, _ := os.ReadFile(logPath)
	if !strings.Contains(string(logb), `"GET / HTTP/1.1" 200 - `) || !strings.Contains(string(logb), `"127.0.0.2:8080"`) {
		t.Errorf("access log:\n%s", logb)
	}
}

// TestRedirectApp is the app process of TestRunWithEBPFRedirect; it does
// nothing unless started by it.
func TestRedirectApp(t *testing.T) {
	if os.Getenv("MESHLET_E2E_APP") != "1" {
		t.Skip("helper process of TestRunWithEBPFRedirect (runs only with MESHLET_E2E_APP=1)")
	}
	for _, vip := range []string{"10.96.0.10:80", "[fd00:96::10]:80"} {
		c, err := net.DialTimeout("tcp", vip, 3*time.Second)
		if err != nil {
			t.Fatalf("dial the VIP %s: %v", vip, err)
		}
		fmt.Printf("PEER %s\n", c.RemoteAddr())
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: vip\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("response from %s: %v", vip, err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		fmt.Printf("APP GOT: %s\n", b)
	}
	// Opaque TCP through the sidecar's TCP proxy.
	c, err := net.DialTimeout("tcp", "10.96.0.10:7000", 3*time.Second)
	if err != nil {
		t.Fatalf("dial the TCP VIP: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, "ping\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("TCP echo through the sidecar: %q, %v", line, err)
	}
	fmt.Printf("APP GOT TCP: %s", line)
}

func cgroup2Mount(t *testing.T) string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+1 < len(f) && f[i+1] == "cgroup2" {
				return f[4]
			}
		}
	}
	return ""
}

func ownCgroupProcs(t *testing.T, mnt string) string {
	data, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(string(data), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mnt, rel, "cgroup.procs")
		}
	}
	t.Fatal("no cgroup v2 entry")
	return ""
}

func moveSelf(t *testing.T, procs string) {
	if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatalf("join %s: %v", procs, err)
	}
}

func grepMetric(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// syncBuffer is a bytes.Buffer one goroutine writes while another reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
