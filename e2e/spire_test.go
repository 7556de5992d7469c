//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// spireBin builds (or finds cached) spire-server and spire-agent.
func spireBin(t *testing.T) string {
	t.Helper()
	return toolsBin(t, "MESHLET_SPIRE_BIN", "tools.sh", "builds etcd, the Kubernetes binaries and SPIRE; ~20 min cold")
}

// spire runs a SPIRE server and agent on loopback and a Unix socket
// (join-token node attestation, unix workload attestation).
type spire struct {
	bin, dir, serverSock, agentSock string
}

func (s *spire) cli(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(s.bin, args[0]), args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func startSPIRE(t *testing.T, svidTTL time.Duration) *spire {
	t.Helper()
	s := &spire{bin: spireBin(t), dir: t.TempDir()}
	// Unix socket paths must be short: keep them in a short directory.
	sockDir, err := os.MkdirTemp("/tmp", "spire")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	// Workloads that are not root (the sidecar once it has switched to
	// uid 1337) reach the agent's socket through it, as they reach
	// /run/spire/sockets in a cluster.
	if err := os.Chmod(sockDir, 0o711); err != nil {
		t.Fatal(err)
	}
	s.serverSock, s.agentSock = filepath.Join(sockDir, "server.sock"), filepath.Join(sockDir, "agent.sock")
	port := portOf(localPort(t, "127.0.0.1"))
	serverConf := writeFile(t, s.dir, "server.conf", fmt.Sprintf(`server {
  bind_address = "127.0.0.1"
  bind_port = "%s"
  socket_path = "%s"
  trust_domain = "example.org"
  data_dir = "%s/server-data"
  log_level = "WARN"
  ca_ttl = "2h"
  default_x509_svid_ttl = "1h"
}
plugins {
  DataStore "sql" {
    plugin_data {
      database_type = "sqlite3"
      connection_string = "%s/server-data/datastore.sqlite3"
    }
  }
  NodeAttestor "join_token" {
    plugin_data {}
  }
  KeyManager "memory" {
    plugin_data {}
  }
}
`, port, s.serverSock, s.dir, s.dir))
	startProc(t, "spire-server", filepath.Join(s.bin, "spire-server"), "run", "-config", serverConf)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		if exec.Command(filepath.Join(s.bin, "spire-server"), "healthcheck", "-socketPath", s.serverSock).Run() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("spire-server never became healthy")
		}
	}
	out := s.cli(t, "spire-server", "token", "generate", "-socketPath", s.serverSock, "-spiffeID", "spiffe://example.org/agent")
	m := regexp.MustCompile(`Token: (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no join token in %q", out)
	}
	// The workload: anything running as this test's uid gets the web
	// identity, renewed by the agent at about half of svidTTL.
	s.cli(t, "spire-server", "entry", "create", "-socketPath", s.serverSock, "-parentID", "spiffe://example.org/agent",
		"-spiffeID", "spiffe://example.org/ns/shop/sa/web", "-selector", fmt.Sprintf("unix:uid:%d", os.Getuid()),
		"-x509SVIDTTL", fmt.Sprint(int(svidTTL.Seconds())))
	agentConf := writeFile(t, s.dir, "agent.conf", fmt.Sprintf(`agent {
  data_dir = "%s/agent-data"
  log_level = "WARN"
  server_address = "127.0.0.1"
  server_port = "%s"
  socket_path = "%s"
  trust_domain = "example.org"
  insecure_bootstrap = true
}
plugins {
  NodeAttestor "join_token" {
    plugin_data {}
  }
  KeyManager "memory" {
    plugin_data {}
  }
  WorkloadAttestor "unix" {
    plugin_data {}
  }
}
`, s.dir, port, s.agentSock))
	startProc(t, "spire-agent", filepath.Join(s.bin, "spire-agent"), "run", "-config", agentConf, "-joinToken", m[1])
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		out, err := exec.Command(filepath.Join(s.bin, "spire-agent"), "api", "fetch", "x509", "-socketPath", s.agentSock).CombinedOutput()
		if err == nil && bytes.Contains(out, []byte("spiffe://example.org/ns/shop/sa/web")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the SPIRE agent never served the workload's SVID: %v\n%s", err, out)
		}
	}
	return s
}

// TestSPIREInterop: the real sidecar takes its SVID and trust bundle over
// SDS from a real SPIRE agent (Unix socket, no token: the agent attests
// the process), serves STRICT mTLS with them to openssl s_client holding
// an SVID fetched from the same agent, and picks up the rotations SPIRE
// pushes (20-second SVIDs, renewed by the agent at about half-life).
func TestSPIREInterop(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl is required for this test (Debian: apt-get install openssl): %v", err)
	}
	sidecar, err := sidecarBin()
	if err != nil {
		t.Fatal(err)
	}
	sp := startSPIRE(t, 20*time.Second)
	dir := t.TempDir()
	app := tcpEchoServer(t)
	in, admin, health := localPort(t, "127.0.0.2"), localPort(t, "127.0.0.1"), localPort(t, "127.0.0.1")
	cfg := writeFile(t, dir, "sidecar.yaml", fmt.Sprintf(`node: {id: web-0.shop, cluster: web}
admin: %s
health: %s
prometheus: ""
access_log: {path: %s, flush_interval: 50ms}
listeners:
  - {name: inbound, address: %s, direction: inbound, protocol: tcp,
     mtls: {mode: STRICT, trust_domains: [example.org]}, routes: [{cluster: app}]}
clusters:
  - {name: app, type: STATIC, connect_timeout: 1s, load_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %s}}}}]}]}}
`, admin, health, filepath.Join(dir, "access.log"), in, portOf(app)))
	startProc(t, "sidecar", sidecar, "run", "-config", cfg, "-watch", "0", "-sds", "unix://"+sp.agentSock)
	waitReady(t, health)

	// openssl holds an SVID of its own from the agent.
	svidDir := filepath.Join(dir, "svid")
	if err := os.MkdirAll(svidDir, 0o700); err != nil {
		t.Fatal(err)
	}
	talk := func(msg string) string {
		sp.cli(t, "spire-agent", "api", "fetch", "x509", "-socketPath", sp.agentSock, "-write", svidDir)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, openssl, "s_client", "-connect", in, "-tls1_3", "-alpn", "meshlet-tcp", "-quiet",
			"-cert", filepath.Join(svidDir, "svid.0.pem"), "-key", filepath.Join(svidDir, "svid.0.key"),
			"-CAfile", filepath.Join(svidDir, "bundle.0.pem"), "-verify_return_error")
		var out syncBuf
		cmd.Stdout, cmd.Stderr = &out, &out
		stdin, _ := cmd.StdinPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		fmt.Fprintf(stdin, "%s\n", msg)
		for !strings.Contains(out.String(), msg) {
			if ctx.Err() != nil {
				t.Fatalf("no echo of %q through the sidecar:\n%s", msg, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		return out.String()
	}
	talk("hello from an SVID")
	first, ok := metricValue(admin, "meshlet_workload_cert_expiry_seconds")
	if !ok || first <= 0 || first > 20 {
		t.Fatalf("the sidecar's certificate has %v s left (want a 20 s SVID from SPIRE)", first)
	}
	// SPIRE rotates the SVID at about half-life: the sidecar takes it (the
	// time left jumps up).
	last := first
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		left, ok := metricValue(admin, "meshlet_workload_cert_expiry_seconds")
		if ok && left > last+2 {
			t.Logf("rotation picked up: %.1f s left, was %.1f s", left, last)
			break
		}
		if ok {
			last = left
		}
		if time.Now().After(deadline) {
			t.Fatal("the sidecar never picked up a rotated SVID from SPIRE")
		}
	}
	talk("hello after the rotation")
	logB, _ := os.ReadFile(filepath.Join(dir, "access.log"))
	if !strings.Contains(string(logB), "spiffe://example.org/ns/shop/sa/web") {
		t.Errorf("access log lacks the peer's SPIFFE ID:\n%s", logB)
	}
}

// tcpEchoServer is a line echo on 127.0.0.1 (socat-free: the test's own).
func tcpEchoServer(t *testing.T) string {
	t.Helper()
	fortio := fortioBin(t)
	addr := localPort(t, "127.0.0.1")
	startProc(t, "fortio-tcp-echo", fortio, "tcp-echo", "-tcp-port", addr)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := netDial(addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("fortio tcp-echo on %s never listened", addr)
		}
	}
}

func netDial(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, time.Second) }
