package bpf

// Test fixtures: cgroups, network namespaces and helper processes, all named
// meshlet-test-<pid>-... so that sweep.sh can find what a killed run left.
//
// Safety: every test that dials a Service-like address (10.96.0.0/12) does it
// from a network namespace of its own that has no route off the machine
// (only lo, dummies and veths between the test's own namespaces), plus a
// blackhole route for 10.96.0.0/12 inside it.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet-dev/meshlet/internal/privileged"
)

const (
	testPrefix = "meshlet-test-"
	helperEnv  = "MESHLET_TEST_HELPER" // role of a re-executed test binary
	argsEnv    = "MESHLET_TEST_ARGS"   // its JSON arguments
)

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runHelper(role))
	}
	root := os.Geteuid() == 0
	if root {
		// What killed runs left (their owners are gone); a live run's are kept.
		if out, err := exec.Command("./sweep.sh").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "bpf: sweep.sh before the tests: %v\n%s", err, out)
			os.Exit(1)
		} else if len(out) > 0 {
			fmt.Fprintf(os.Stderr, "bpf: swept what an earlier run left:\n%s", out)
		}
	}
	code := m.Run()
	if root {
		// Nothing of this run may be left: cgroups, namespaces, pins.
		out, err := exec.Command("./sweep.sh", "--check", "--pid", fmt.Sprint(os.Getpid())).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: the tests left things behind (%v):\n%s", err, out)
			code = 1
		}
	}
	os.Exit(code)
}

// requireRoot skips a test that cannot run without root, or fails it where
// privileged tests are required (privileged.Root).
func requireRoot(t testing.TB) {
	t.Helper()
	privileged.Root(t, "the bpf tests load eBPF programs and create cgroups and network namespaces (run: sudo go test ./bpf/)")
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("the bpf tests need the ip command (iproute2): %v", err)
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Fatalf("the bpf tests need nsenter (util-linux): %v", err)
	}
	if _, err := Cgroup2Mount(); err != nil {
		t.Fatalf("the bpf tests need a cgroup v2 mount: %v", err)
	}
}

var fixtureSeq atomic.Int64

// name returns a unique fixture name with the sweepable prefix.
func name(what string) string {
	return fmt.Sprintf("%s%d-%d-%s", testPrefix, os.Getpid(), fixtureSeq.Add(1), what)
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// ---- cgroups ----

// newCgroup creates a cgroup directory (under the cgroup2 mount if parent is
// empty) and removes it in cleanup.
func newCgroup(t testing.TB, parent, base string) string {
	t.Helper()
	if parent == "" {
		mnt, err := Cgroup2Mount()
		if err != nil {
			t.Fatal(err)
		}
		parent = mnt
	}
	dir := filepath.Join(parent, base)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() { removeCgroup(t, dir) })
	return dir
}

// removeCgroup removes an (empty by now) cgroup, waiting for exited
// processes to leave it.
func removeCgroup(t testing.TB, dir string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			t.Errorf("remove cgroup %s: %v (procs: %q)", dir, err, procs)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// podCgroups is a pod's cgroup with an app and a proxy (sidecar) child.
type podCgroups struct{ pod, app, proxy string }

func newPodCgroups(t testing.TB) podCgroups {
	pod := newCgroup(t, "", name("pod"))
	return podCgroups{pod: pod, app: newCgroup(t, pod, "app"), proxy: newCgroup(t, pod, "proxy")}
}

// joinCgroup moves the whole test process into dir until the test ends.
// Hooks follow the cgroup a socket is created in, so sockets made after this
// are dir's. Tests that use it must not run in parallel.
func joinCgroup(t testing.TB, dir string) {
	t.Helper()
	orig, err := CurrentCgroup()
	if err != nil {
		t.Fatal(err)
	}
	writeProcs := func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(os.Getpid())), 0)
	}
	if err := writeProcs(dir); err != nil {
		t.Fatalf("join cgroup %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := writeProcs(orig); err != nil {
			t.Errorf("return to cgroup %s: %v", orig, err)
		}
	})
}

// ---- network namespaces ----

// newNetns creates a named network namespace with lo up; it returns the
// path of its bind mount.
func newNetns(t testing.TB, what string) (nsName, path string) {
	t.Helper()
	nsName = name(what)
	run(t, "ip", "netns", "add", nsName)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", nsName).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", nsName, err, out)
		}
	})
	run(t, "ip", "-n", nsName, "link", "set", "lo", "up")
	// Belt and braces: the namespace has no route out anyway.
	run(t, "ip", "-n", nsName, "route", "add", "blackhole", "10.96.0.0/12")
	return nsName, "/run/netns/" + nsName
}

// vethPair links two namespaces: a gets addrA (e.g. "10.211.0.2/24") on
// devA, b gets addrB on devB. IPv6 addresses are added with nodad.
func vethPair(t testing.TB, nsA, devA string, addrsA []string, nsB, devB string, addrsB []string) {
	t.Helper()
	run(t, "ip", "-n", nsA, "link", "add", devA, "type", "veth", "peer", "name", devB, "netns", nsB)
	for _, side := range []struct {
		ns, dev string
		addrs   []string
	}{{nsA, devA, addrsA}, {nsB, devB, addrsB}} {
		for _, a := range side.addrs {
			args := []string{"ip", "-n", side.ns, "addr", "add", a, "dev", side.dev}
			if strings.Contains(a, ":") {
				args = append(args, "nodad")
			}
			run(t, args...)
		}
		run(t, "ip", "-n", side.ns, "link", "set", side.dev, "up")
	}
}

// localAddrs gives a namespace more local addresses (on its lo), for
// "real" destinations inside it. (No dummy devices: the kernel may lack the
// module.)
func localAddrs(t testing.TB, ns string, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		run(t, "ip", "-n", ns, "addr", "add", a, "dev", "lo")
	}
}

// inNetns runs fn on an OS thread that has joined the namespace at path:
// sockets fn creates belong to that namespace for good.
func inNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		ns, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: Go discards it when the goroutine ends.
			errc <- fmt.Errorf("setns back: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// listenTCP listens with plain TCP (Go's default would be MPTCP).
func listenTCP(t testing.TB, netns, network, addr string) *net.TCPListener {
	t.Helper()
	var ln net.Listener
	listen := func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		var err error
		ln, err = lc.Listen(context.Background(), network, addr)
		return err
	}
	var err error
	if netns == "" {
		err = listen()
	} else {
		err = inNetns(netns, listen)
	}
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.(*net.TCPListener)
}

// dialTCP dials from the test process (in netns if given), plain TCP.
func dialTCP(netns, network, addr string) (*net.TCPConn, error) {
	var c net.Conn
	dial := func() error {
		d := net.Dialer{Timeout: 5 * time.Second}
		d.SetMultipathTCP(false)
		var err error
		c, err = d.Dial(network, addr)
		return err
	}
	var err error
	if netns == "" {
		err = dial()
	} else {
		err = inNetns(netns, dial)
	}
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// serveTagged answers every connection on ln with tag and what it saw,
// after reading the client's request (until its write side closes).
func serveTagged(ln net.Listener, tag string) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				req, _ := io.ReadAll(c)
				fmt.Fprintf(c, "%s local=%s peer=%s req=%s", tag, c.LocalAddr(), c.RemoteAddr(), req)
			}()
		}
	}()
}

// ---- helper processes (the test binary re-executed) ----

// helperProc is a running helper with its stdout as lines.
type helperProc struct {
	cmd   *exec.Cmd
	lines chan string
	stdin io.WriteCloser
}

type helperOpts struct {
	role   string
	args   any    // JSON for the helper
	cgroup string // start inside this cgroup (CLONE_INTO_CGROUP)
	netns  string // run inside this network namespace (nsenter)
}

func startHelper(t testing.TB, o helperOpts) *helperProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{self, "-test.run=^$"}
	if o.netns != "" {
		argv = append([]string{"nsenter", "--net=" + o.netns, "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	js, err := json.Marshal(o.args)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), helperEnv+"="+o.role, argsEnv+"="+string(js))
	cmd.Stderr = &testWriter{t: t, prefix: o.role + ": "}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if o.cgroup != "" {
		cg, err := os.Open(o.cgroup)
		if err != nil {
			t.Fatal(err)
		}
		defer cg.Close()
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(cg.Fd())
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper %s: %v", o.role, err)
	}
	h := &helperProc{cmd: cmd, lines: make(chan string, 100), stdin: stdin}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return h
}

// next returns the helper's next output line with the given prefix (the
// rest of the line), skipping others.
func (h *helperProc) next(t testing.TB, prefix string) string {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("helper exited before printing %q (%v)", prefix, h.cmd.Wait())
			}
			if rest, found := strings.CutPrefix(line, prefix); found {
				return strings.TrimSpace(rest)
			}
		case <-timeout:
			t.Fatalf("helper printed no %q line in 15 s", prefix)
		}
	}
}

// nextJSON decodes the next line with prefix into v.
func (h *helperProc) nextJSON(t testing.TB, prefix string, v any) {
	t.Helper()
	line := h.next(t, prefix)
	if err := json.Unmarshal([]byte(line), v); err != nil {
		t.Fatalf("helper line %s %s: %v", prefix, line, err)
	}
}

// testWriter forwards a helper's stderr to the test log.
type testWriter struct {
	t      testing.TB
	prefix string
}

func (w *testWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + line)
	}
	return len(p), nil
}

// dialResult is what the "dial" helper reports.
type dialResult struct {
	Local    string // the app socket's own address
	Remote   string // net.Conn.RemoteAddr after connecting
	Peername string // getpeername(2) on the socket
	Reply    string
	Err      string
}

type dialArgs struct {
	Network string // tcp4, tcp6, udp4, or dualstack (AF_INET6 socket, v4-mapped destination)
	Addr    string
	Send    string
	UID     int  // switch to this uid before dialling (0: stay root)
	MPTCP   bool // dial with MPTCP
}

// appDial runs one dial in a helper process started in cgroup and netns.
func appDial(t testing.TB, cgroup, netns string, a dialArgs) dialResult {
	t.Helper()
	if a.Send == "" {
		a.Send = "hello"
	}
	h := startHelper(t, helperOpts{role: "dial", args: a, cgroup: cgroup, netns: netns})
	var r dialResult
	h.nextJSON(t, "RESULT", &r)
	return r
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s after 5 s", what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustLoad(t testing.TB, opts Options) *Objects {
	t.Helper()
	o, err := Load(opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("Objects.Close: %v", err)
		}
	})
	return o
}

func mustCounters(t testing.TB, o *Objects) Counters {
	t.Helper()
	c, err := o.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
