package svidfile

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/mtls"
)

var webID = spiffeid.RequireFromString("spiffe://cluster.local/ns/prod/sa/web")

func testCA(t testing.TB) *mtls.CA {
	t.Helper()
	return testtool.MeshCA(t, spiffeid.RequireTrustDomainFromString("cluster.local"), nil)
}

// svid is one set of identity files' content.
type svid struct {
	chain []*x509.Certificate
	key   crypto.Signer
	ca    *mtls.CA
}

func issue(t testing.TB, ca *mtls.CA, id spiffeid.ID, ttl time.Duration) svid {
	t.Helper()
	chain, key := testtool.Issue(t, ca, id, ttl)
	return svid{chain: chain, key: key, ca: ca}
}

func (s svid) files(t testing.TB) (cert, key, bundle []byte) {
	t.Helper()
	k, err := mtls.EncodePrivateKeyPEM(s.key)
	if err != nil {
		t.Fatal(err)
	}
	return mtls.EncodeCertificatesPEM(s.chain), k, mtls.EncodeCertificatesPEM([]*x509.Certificate{s.ca.Root()})
}

// writeRenamed writes each file as spiffe-helper does: a temporary file
// in the same directory renamed over the old one.
func writeRenamed(t testing.TB, dir string, names [3]string, content [3][]byte) {
	t.Helper()
	for i, name := range names {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, content[i], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// writeProjected writes the set as Kubernetes' atomic writer does for a
// projected or CSI volume: the files in a new timestamped directory, the
// ..data symlink swapped to it by rename, each name a symlink through
// ..data.
func writeProjected(t testing.TB, dir string, names [3]string, content [3][]byte) {
	t.Helper()
	gen, err := os.MkdirTemp(dir, "..2026_")
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range names {
		if err := os.WriteFile(filepath.Join(gen, name), content[i], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
}

var defaultNames = [3]string{DefaultCertFile, DefaultKeyFile, DefaultBundleFile}

func write(t testing.TB, dir string, s svid) {
	t.Helper()
	c, k, b := s.files(t)
	writeRenamed(t, dir, defaultNames, [3][]byte{c, k, b})
}

// logSink collects log lines for waiting on a refusal.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newWatcher(t testing.TB, dir string, now func() time.Time, logs *logSink) (*Watcher, *mtls.Store) {
	t.Helper()
	store := mtls.NewStore()
	cfg := Config{Dir: dir, Store: store, Interval: 10 * time.Millisecond, Now: now}
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w, store
}

func serial(s *mtls.Snapshot) string {
	if s.Certificate == nil {
		return "none"
	}
	return s.Certificate.Leaf.SerialNumber.String()
}

func TestLoadRefusesBadSetsAndKeepsTheLastGood(t *testing.T) {
	ca := testCA(t)
	dir := t.TempDir()
	clock := time.Now()
	w, store := newWatcher(t, dir, func() time.Time { return clock }, nil)
	good := issue(t, ca, webID, time.Hour)
	write(t, dir, good)
	if err := w.Load(); err != nil {
		t.Fatalf("good set: %v", err)
	}
	if !store.Current().Ready() || store.Current().ID != webID {
		t.Fatalf("after a good set the store has %s, ready %t", store.Current().ID, store.Current().Ready())
	}
	want := serial(store.Current())

	other := issue(t, ca, webID, time.Hour)
	goodCert, goodKey, goodBundle := good.files(t)
	otherCert, _, _ := other.files(t)
	selfSigned := func() []byte {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "no-spiffe"},
			NotBefore: clock.Add(-time.Minute), NotAfter: clock.Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return mtls.EncodeCertificatesPEM([]*x509.Certificate{c})
	}()
	_, _, foreignBundle := issue(t, testCA(t), webID, time.Hour).files(t)
	for _, tc := range []struct {
		name                string
		cert, key, bundle   []byte
		later               time.Duration
		wantFile, wantError string
	}{
		{"key of another certificate (half-written rotation)", otherCert, goodKey, goodBundle, 0, DefaultKeyFile, "does not match"},
		{"no SPIFFE ID", selfSigned, goodKey, goodBundle, 0, DefaultCertFile, "URI"},
		{"expired", goodCert, goodKey, goodBundle, 2 * time.Hour, DefaultCertFile, "expired"},
		{"bundle not parsing", goodCert, goodKey, []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"), 0, DefaultBundleFile, "bundle"},
		{"bundle of another CA", goodCert, goodKey, foreignBundle, 0, DefaultBundleFile, "verify"},
		{"empty key (truncated)", goodCert, nil, goodBundle, 0, DefaultKeyFile, "PEM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock = time.Now().Add(tc.later)
			defer func() { clock = time.Now() }()
			writeRenamed(t, dir, defaultNames, [3][]byte{tc.cert, tc.key, tc.bundle})
			err := w.Load()
			if err == nil {
				t.Fatal("bad set accepted")
			}
			if !strings.Contains(err.Error(), filepath.Join(dir, tc.wantFile)) || !strings.Contains(err.Error(), tc.wantError) {
				t.Errorf("error %q does not name %s and say %q", err, tc.wantFile, tc.wantError)
			}
			if got := serial(store.Current()); got != want {
				t.Errorf("store serial %s after a refused set, want the last good %s", got, want)
			}
		})
	}
}

// With Config.ID set, a valid set naming another workload is refused, the
// ID in the error, and one naming it is installed.
func TestLoadRefusesAnotherWorkloadsIdentity(t *testing.T) {
	ca := testCA(t)
	dir := t.TempDir()
	store := mtls.NewStore()
	w, err := New(Config{Dir: dir, Store: store, ID: webID})
	if err != nil {
		t.Fatal(err)
	}
	db := spiffeid.RequireFromString("spiffe://cluster.local/ns/prod/sa/db")
	write(t, dir, issue(t, ca, db, time.Hour))
	if err := w.Load(); err == nil || !strings.Contains(err.Error(), "names "+db.String()+", want "+webID.String()) {
		t.Fatalf("another workload's set: %v, want it refused naming both IDs", err)
	}
	if store.Current().Ready() {
		t.Fatalf("the store took %s", store.Current().ID)
	}
	write(t, dir, issue(t, ca, webID, time.Hour))
	if err := w.Load(); err != nil || store.Current().ID != webID {
		t.Fatalf("the workload's own set: %v, store %s", err, store.Current().ID)
	}
}

func TestRunWaitsForTheFirstGoodSetAndFollowsChanges(t *testing.T) {
	ca := testCA(t)
	dir := t.TempDir()
	logs := &logSink{}
	w, store := newWatcher(t, dir, nil, logs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	}()
	waitLog := func(sub string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if strings.Contains(logs.String(), sub) {
				return
			}
		}
		t.Fatalf("no log %q; logs:\n%s", sub, logs)
	}
	// Half a set: the agent has written the certificate only.
	first := issue(t, ca, webID, time.Hour)
	c, k, b := first.files(t)
	other := issue(t, ca, webID, time.Hour)
	_, otherKey, _ := other.files(t)
	writeRenamed(t, dir, defaultNames, [3][]byte{c, otherKey, b})
	waitLog("does not match")
	if store.Current().Ready() {
		t.Fatal("store ready after a bad first set")
	}
	writeRenamed(t, dir, defaultNames, [3][]byte{c, k, b})
	ctxWait, cancelWait := context.WithTimeout(ctx, 5*time.Second)
	defer cancelWait()
	snap, err := store.WaitReady(ctxWait)
	if err != nil {
		t.Fatal(err)
	}
	if serial(snap) != first.chain[0].SerialNumber.String() {
		t.Fatalf("installed serial %s, want %s", serial(snap), first.chain[0].SerialNumber)
	}
	// A refused rotation keeps the running identity and is logged with
	// the file at fault.
	writeRenamed(t, dir, defaultNames, [3][]byte{c, []byte("-----BEGIN PRIVATE KEY-----\n"), b})
	waitLog(filepath.Join(dir, DefaultKeyFile))
	if got := serial(store.Current()); got != first.chain[0].SerialNumber.String() {
		t.Fatalf("store serial %s after a refused rotation, want %s", got, first.chain[0].SerialNumber)
	}
	// And the next good one is installed.
	write(t, dir, other)
	next := store.Current()
	for serial(next) != other.chain[0].SerialNumber.String() {
		select {
		case <-next.Superseded():
			next = store.Current()
		case <-ctxWait.Done():
			t.Fatalf("rotation not installed; logs:\n%s", logs)
		}
	}
}
