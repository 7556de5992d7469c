package cli

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/mtls"
)

// TestRunIdentityDirGatesReadiness runs `sidecar run -identity-dir` on an
// empty directory, with -identity the ID the files must name (as the
// injector runs it with csi-driver-spiffe): not ready while the files are
// missing or refused (a key of another certificate, another workload's
// valid set), ready once a good set is written, serving it on the
// metrics' expiry gauge.
func TestRunIdentityDirGatesReadiness(t *testing.T) {
	free := func() string {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		return l.Addr().String()
	}
	admin := free()
	path := filepath.Join(t.TempDir(), "sidecar.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf("admin: %s\nhealth: \"off\"\nprometheus: \"off\"\naccess_log: {path: \"off\"}\n", admin)), 0o644)
	dir := t.TempDir()
	logs := captureStderr(t)
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"-config", path, "-identity-dir", dir, "-identity-files", "tls.crt,tls.key,ca.crt",
			"-identity", "spiffe://cluster.local/ns/prod/sa/web"}, io.Discard)
	}()
	ready := func() int {
		resp, err := http.Get("http://" + admin + "/ready")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if cond() {
				return
			}
		}
		t.Fatalf("timed out waiting for %s; logs:\n%s", what, logs())
	}
	waitUntil("the admin server", func() bool { return ready() != 0 })
	if code := ready(); code != http.StatusServiceUnavailable {
		t.Fatalf("/ready %d without identity files, want 503", code)
	}

	ca := testtool.MeshCA(t, spiffeid.RequireTrustDomainFromString("cluster.local"), nil)
	id := spiffeid.RequireFromString("spiffe://cluster.local/ns/prod/sa/web")
	chain, key := testtool.Issue(t, ca, id, time.Hour)
	keyPEM, _ := mtls.EncodePrivateKeyPEM(key)
	otherKey, _ := mtls.NewKey()
	otherKeyPEM, _ := mtls.EncodePrivateKeyPEM(otherKey)
	put := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name+".tmp"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, name+".tmp"), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	put("ca.crt", mtls.EncodeCertificatesPEM([]*x509.Certificate{ca.Root()}))
	put("tls.crt", mtls.EncodeCertificatesPEM(chain))
	put("tls.key", otherKeyPEM)
	waitUntil("the bad set to be refused", func() bool { return strings.Contains(logs(), "refused identity files") })
	if code := ready(); code != http.StatusServiceUnavailable {
		t.Fatalf("/ready %d after a refused set, want 503", code)
	}
	dbChain, dbKey := testtool.Issue(t, ca, spiffeid.RequireFromString("spiffe://cluster.local/ns/prod/sa/db"), time.Hour)
	dbKeyPEM, _ := mtls.EncodePrivateKeyPEM(dbKey)
	put("tls.key", dbKeyPEM)
	put("tls.crt", mtls.EncodeCertificatesPEM(dbChain))
	waitUntil("another workload's set to be refused", func() bool {
		return strings.Contains(logs(), "names spiffe://cluster.local/ns/prod/sa/db, want spiffe://cluster.local/ns/prod/sa/web")
	})
	if code := ready(); code != http.StatusServiceUnavailable {
		t.Fatalf("/ready %d after another workload's set, want 503", code)
	}
	put("tls.key", keyPEM)
	put("tls.crt", mtls.EncodeCertificatesPEM(chain))
	waitUntil("readiness after the good set", func() bool { return ready() == http.StatusOK })
	resp, err := http.Get("http://" + admin + "/stats/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "meshlet_workload_cert_ready 1") || !strings.Contains(string(body), "meshlet_workload_cert_expiry_seconds 3") {
		t.Errorf("metrics lack the ready certificate with about an hour left:\n%s", body)
	}

	// Another workload's set once ready: refused, the pod's own kept.
	before := strings.Count(logs(), "names spiffe://cluster.local/ns/prod/sa/db")
	put("tls.key", dbKeyPEM)
	put("tls.crt", mtls.EncodeCertificatesPEM(dbChain))
	waitUntil("another workload's set refused again", func() bool {
		return strings.Count(logs(), "names spiffe://cluster.local/ns/prod/sa/db") > before
	})
	if code := ready(); code != http.StatusOK {
		t.Errorf("/ready %d after a refused set, want the last good identity to keep it 200", code)
	}
	resp, err = http.Get("http://" + admin + "/certs")
	if err != nil {
		t.Fatal(err)
	}
	certs, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(certs), "spiffe://cluster.local/ns/prod/sa/web") || strings.Contains(string(certs), "sa/db") {
		t.Errorf("/certs after another workload's set: %s", certs)
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
}

func TestRunIdentityDirFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-identity-dir", "/x", "-sds", "unix:///run/spire.sock"}, "-identity-dir and -sds are exclusive"},
		{[]string{"-identity-dir", "/x", "-identity-files", "a.pem,b.pem"}, "want CERT,KEY,BUNDLE"},
		{[]string{"-identity-dir", "/x", "-identity-files", "a.pem,,c.pem"}, "want CERT,KEY,BUNDLE"},
		{[]string{"-identity-dir", "/x", "-identity", "web"}, `-identity "web"`},
	} {
		err := run(tc.args, io.Discard)
		var u *cmdline.UsageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %q: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}
