package mtls

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// The Kubernetes Secret store has the same tests in package kubeca.

func TestFileCAStoreLoadOrCreateOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ca.json")
	opts := CAOptions{TrustDomain: spiffeid.RequireTrustDomainFromString("cluster.local"), Intermediate: true}
	if _, err := (&FileCAStore{Path: path}).Load(ctx); !errors.Is(err, ErrCANotFound) {
		t.Fatalf("Load on an empty store: %v, want ErrCANotFound", err)
	}
	first, created, err := LoadOrCreateCA(ctx, &FileCAStore{Path: path}, opts)
	if err != nil || !created {
		t.Fatalf("first LoadOrCreateCA: created=%v err=%v", created, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA file: %v %v", fi, err)
	}
	// A restart: a new store over the same file.
	again, created, err := LoadOrCreateCA(ctx, &FileCAStore{Path: path}, opts)
	if err != nil || created {
		t.Fatalf("second LoadOrCreateCA: created=%v err=%v", created, err)
	}
	if !first.Root().Equal(again.Root()) {
		t.Fatal("the root changed across a restart")
	}
	if err := (&FileCAStore{Path: path}).Create(ctx, first.Material()); !errors.Is(err, ErrCAExists) {
		t.Fatalf("Create over an existing CA: %v, want ErrCAExists", err)
	}
}

func TestFileCAStoreRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.json")
	opts := CAOptions{TrustDomain: spiffeid.RequireTrustDomainFromString("cluster.local")}
	const replicas = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		roots   [][]byte
		created int
	)
	start := make(chan struct{})
	for range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ca, c, err := LoadOrCreateCA(context.Background(), &FileCAStore{Path: path}, opts)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			roots = append(roots, ca.Root().Raw)
			if c {
				created++
			}
		}()
	}
	close(start)
	wg.Wait()
	if created != 1 {
		t.Errorf("%d replicas created a CA, want exactly 1", created)
	}
	for _, r := range roots {
		if !bytes.Equal(r, roots[0]) {
			t.Fatal("replicas ended up with different roots")
		}
	}
}

func TestLoadOrCreateCANeverRegenerates(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := CAOptions{TrustDomain: spiffeid.RequireTrustDomainFromString("cluster.local")}

	// A file that exists but holds no root is reported, not replaced.
	broken := filepath.Join(dir, "broken.json")
	os.WriteFile(broken, []byte(`{"unrelated": "x"}`), 0o600)
	if _, _, err := LoadOrCreateCA(ctx, &FileCAStore{Path: broken}, opts); err == nil || !strings.Contains(err.Error(), "refusing to regenerate") {
		t.Fatalf("broken CA file: err = %v", err)
	}
	if b, _ := os.ReadFile(broken); string(b) != `{"unrelated": "x"}` {
		t.Fatalf("the broken file was modified: %s", b)
	}

	// A CA of another trust domain is refused too.
	path := filepath.Join(dir, "ca.json")
	if _, _, err := LoadOrCreateCA(ctx, &FileCAStore{Path: path}, CAOptions{TrustDomain: spiffeid.RequireTrustDomainFromString("example.org")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCA(ctx, &FileCAStore{Path: path}, opts); err == nil || !strings.Contains(err.Error(), "example.org") {
		t.Fatalf("loading an example.org CA as cluster.local: err = %v", err)
	}
}
