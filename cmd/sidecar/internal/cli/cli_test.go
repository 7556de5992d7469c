package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestSimulateDefaultTableAndJSON(t *testing.T) {
	var out bytes.Buffer
	if err := Main([]string{"lb", "simulate"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "LocalityResidual") {
		t.Errorf("default run does not show the routing state:\n%s", out.String())
	}
	out.Reset()
	if err := Main([]string{"lb", "simulate", "-o", "json", "-example", "failover.yaml"}, &out); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Requests   int `json:"requests"`
		Priorities []struct {
			Share float64 `json:"share"`
		} `json:"priorities"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Requests != 100000 || len(res.Priorities) != 3 {
		t.Fatalf("json output %q: %v", out.String(), err)
	}
}

func TestSimulateFileAndErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.yaml")
	os.WriteFile(path, []byte("policy: RANDOM\nrequests: 1000\npriorities: [{priority: 0, localities: [{zone: a, healthy: 2}]}]\n"), 0o644)
	var out bytes.Buffer
	if err := Main([]string{"lb", "simulate", path}, &out); err != nil || !strings.Contains(out.String(), "RANDOM, 1000 requests") {
		t.Errorf("file run: %v\n%s", err, out.String())
	}
	for _, args := range [][]string{{}, {"lb"}, {"lb", "simulate", "-o", "xml"}, {"lb", "simulate", "/nonexistent.yaml"}, {"lb", "simulate", "a", "b"}} {
		if err := Main(args, &out); err == nil {
			t.Errorf("Main(%q) succeeded", args)
		}
	}
}

// The live demo tells the failover story: local routing, an upstream
// killed without a failed request, zone a drained, everything back.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := Main([]string{"demo", "-phase", "1500ms", "-rps", "100"}, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	last := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		for _, p := range []string{"steady", "killed", "drained", "restored"} {
			if strings.Contains(line, p) {
				last[p] = line
			}
		}
	}
	if len(last) != 4 {
		t.Fatalf("not all phases shown:\n%s", text)
	}
	for p, line := range last {
		if !strings.Contains(line, " none ") {
			t.Errorf("phase %s had failures: %s", p, line)
		}
	}
	if f := strings.Fields(last["drained"]); !strings.Contains(last["drained"], " 0.0% ") || !strings.Contains(last["drained"], "2 of 4") {
		t.Errorf("drained phase should send nothing to zone a with 2 healthy hosts: %v", f)
	}
	if !strings.Contains(last["steady"], "LocalityResidual") || !strings.Contains(last["restored"], "LocalityResidual") || !strings.Contains(last["killed"], "NoLocalityRouting") {
		t.Errorf("routing states:\n%s\n%s\n%s", last["steady"], last["killed"], last["restored"])
	}
}

// `sidecar run` serves from a file, reloads when it changes, refuses an
// invalid change (keeping the running config), and drains on SIGTERM.
func TestRunReloadsAndDrains(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") }))
	free := func() string {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		return l.Addr().String()
	}
	listen, admin := free(), free()
	host, port, _ := net.SplitHostPort(up.Addr().String())
	cfg := func(timeout string) string {
		return fmt.Sprintf(`admin: %s
health: "off"
prometheus: "off"
access_log: {path: "off"}
listeners:
  - address: %s
    original_destination: 10.96.0.10:80
    routes:
      - {match: {destination: "10.96.0.10:80"}, cluster: up, timeout: %s}
clusters:
  - name: up
    load_assignment:
      cluster_name: up
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: %s, port_value: %s}}}}]}]
`, admin, listen, timeout, host, port)
	}
	path := filepath.Join(t.TempDir(), "sidecar.yaml")
	os.WriteFile(path, []byte(cfg("15s")), 0o644)
	done := make(chan error, 1)
	var out bytes.Buffer
	logs := captureStderr(t) // before run makes its logger from os.Stderr
	go func() { done <- run([]string{"-config", path, "-watch", "50ms", "-log-level", "error"}, &out) }()
	routeTimeout := func() string {
		resp, err := http.Get("http://" + admin + "/config_dump")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		var d struct {
			Listeners []struct {
				Routes []struct{ Timeout time.Duration }
			}
		}
		json.NewDecoder(resp.Body).Decode(&d)
		if len(d.Listeners) == 0 {
			return ""
		}
		return d.Listeners[0].Routes[0].Timeout.String()
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if cond() {
				return
			}
		}
		t.Fatalf("timed out waiting for %s", what)
	}
	waitUntil("the sidecar to serve", func() bool { return routeTimeout() == "15s" })
	resp, err := http.Get("http://" + listen + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "up" {
		t.Fatalf("through the sidecar: %q", b)
	}
	os.WriteFile(path, []byte(cfg("3s")), 0o644)
	waitUntil("the file change to reload", func() bool { return routeTimeout() == "3s" })
	os.WriteFile(path, []byte(cfg("3s")+"bogus: 1\n"), 0o644)
	waitUntil("the invalid change to be refused", func() bool {
		return strings.Contains(logs(), "config reload refused; keeping the running config") && strings.Contains(logs(), "bogus")
	})
	if got := routeTimeout(); got != "3s" {
		t.Errorf("after an invalid change the route timeout is %q, want the running 3s", got)
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop on SIGTERM")
	}
	if _, err := net.DialTimeout("tcp", listen, 200*time.Millisecond); err == nil {
		t.Error("listener still open after SIGTERM")
	}
}

// captureStderr points os.Stderr at a pipe until the test ends (still
// copying to the real one) and returns what was written to it so far: the
// way to wait for a log line of code whose logger writes to os.Stderr.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stderr
	os.Stderr = w
	var mu sync.Mutex
	var buf bytes.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			mu.Lock()
			buf.Write(b[:n])
			mu.Unlock()
			orig.Write(b[:n])
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		os.Stderr = orig
		w.Close()
		<-copied
		r.Close()
	})
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
}

func TestDrainAndWaitHooks(t *testing.T) {
	var drained bool
	mux := http.NewServeMux()
	mux.HandleFunc("/drain", func(w http.ResponseWriter, r *http.Request) { drained = r.Method == http.MethodPost })
	mux.HandleFunc("/healthz/ready", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "LIVE") })
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go http.Serve(l, mux)
	var out bytes.Buffer
	if err := Main([]string{"drain", "-admin", l.Addr().String(), "-wait", "0s"}, &out); err != nil || !drained {
		t.Errorf("drain: %v (drained %v)", err, drained)
	}
	if err := Main([]string{"wait", "-health", l.Addr().String(), "-timeout", "2s"}, &out); err != nil {
		t.Errorf("wait: %v", err)
	}
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := dead.Addr().String()
	dead.Close()
	if err := Main([]string{"wait", "-health", addr, "-timeout", "300ms"}, &out); err == nil {
		t.Error("wait succeeded against nothing")
	}
}

// resolveWorkers lowers the runtime's processors to -concurrency, never
// raises them, and 0 keeps the default; the count it returns is the
// workers'.
func TestResolveWorkers(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	runtime.GOMAXPROCS(4)
	if w, n := resolveWorkers(0), runtime.GOMAXPROCS(0); w != 4 || n != 4 {
		t.Errorf("0: %d workers, GOMAXPROCS %d, want 4 and 4 kept", w, n)
	}
	if w, n := resolveWorkers(8), runtime.GOMAXPROCS(0); w != 4 || n != 4 {
		t.Errorf("8 over a default of 4: %d workers, GOMAXPROCS %d, want 4 and 4 (a CPU limit is not raised)", w, n)
	}
	if w, n := resolveWorkers(2), runtime.GOMAXPROCS(0); w != 2 || n != 2 {
		t.Errorf("2: %d workers, GOMAXPROCS %d, want 2 and 2", w, n)
	}
}

// At -concurrency 2 the sidecar runs and reports 2 workers although the
// processor scaler has already run Go on one processor: the count is
// decided once, at start, and never read back from GOMAXPROCS. Then
// -adaptive-procs=false keeps the 2 processors.
func TestRunWorkersAtConcurrency(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	for _, adaptive := range []bool{true, false} {
		runtime.GOMAXPROCS(2)
		listen, admin, prom := free(), free(), free()
		path := filepath.Join(t.TempDir(), "sidecar.yaml")
		os.WriteFile(path, []byte(fmt.Sprintf(`admin: %s
health: "off"
prometheus: %s
access_log: {path: "off"}
listeners:
  - address: %s
    original_destination: 10.96.0.10:80
    routes:
      - {match: {destination: "10.96.0.10:80"}, cluster: up}
clusters:
  - name: up
    load_assignment:
      cluster_name: up
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 1}}}}]}]
`, admin, prom, listen)), 0o644)
		// run prints its start-up line once everything is started.
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- run([]string{"-config", path, "-watch", "0", "-log-level", "error", "-concurrency", "2",
				fmt.Sprintf("-adaptive-procs=%v", adaptive)}, pw)
		}()
		lines := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(pr).ReadString('\n')
			lines <- line
		}()
		var line string
		select {
		case line = <-lines:
		case err := <-done:
			t.Fatalf("adaptive %v: run returned before its start-up line: %v", adaptive, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("adaptive %v: no start-up line", adaptive)
		}
		if !strings.HasPrefix(line, "sidecar: 2 workers;") {
			t.Errorf("adaptive %v: start-up line %q, want 2 workers", adaptive, line)
		}
		procs := runtime.GOMAXPROCS(0)
		if want := map[bool]int{true: 1, false: 2}[adaptive]; procs != want {
			t.Errorf("adaptive %v: GOMAXPROCS %d once started, want %d", adaptive, procs, want)
		}
		stats := httpGet(t, "http://"+admin+"/stats?filter=server.concurrency")
		if !strings.Contains(stats, "server.concurrency: 2\n") {
			t.Errorf("adaptive %v: /stats %q, want server.concurrency: 2", adaptive, stats)
		}
		metrics := httpGet(t, "http://"+prom+"/stats/prometheus")
		if want := fmt.Sprintf("meshlet_go_processors %d\n", procs); !strings.Contains(metrics, want) {
			t.Errorf("adaptive %v: /stats/prometheus has no %q", adaptive, want)
		}
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("run did not stop on SIGTERM")
		}
		if n := runtime.GOMAXPROCS(0); n != 2 {
			t.Errorf("adaptive %v: GOMAXPROCS %d after run returned, want the 2 it started with", adaptive, n)
		}
	}
}

// httpGet returns the body of a GET of url.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return string(b)
}
