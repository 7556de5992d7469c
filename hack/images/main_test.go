package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/meshlet-dev/meshlet/internal/images"
	"github.com/meshlet-dev/meshlet/webhook"
)

// The image metadata the test builds with.
const (
	testVersion  = "v0.0.0-test"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	testSource   = "https://github.com/meshlet-dev/meshlet"
	testEpoch    = 1700000000
)

// TestImages builds the shipped images twice with `images build`, as make
// images does (but -pgo=off, the tests' build configuration), and checks
// that both builds give the same index digests and the same tarball bytes;
// that each index has a linux/amd64 and a linux/arm64 image with the
// labels and annotations, the user and the entrypoint they should have;
// that the file system is the base files and one static executable that
// runs (--help, for this machine's architecture); and that `images push`
// puts them in a real registry (go-containerregistry's, in process) under
// the digests build printed.
func TestImages(t *testing.T) {
	if images.UID != webhook.DefaultProxyUID {
		t.Fatalf("the images' non-root uid %d is not the sidecar's proxy uid %d", images.UID, webhook.DefaultProxyUID)
	}
	ctx := context.Background()
	build := func() (string, string) {
		dir := t.TempDir()
		var out bytes.Buffer
		if err := run(ctx, []string{"build", "-dir", dir, "-root", "../..", "-pgo", "off", "-tag", "test",
			"-version", testVersion, "-revision", testRevision, "-source", testSource, "-epoch", "1700000000"}, &out); err != nil {
			t.Fatalf("images build: %v", err)
		}
		return dir, out.String()
	}
	dirA, outA := build()
	dirB, outB := build()
	t.Logf("images build:\n%s", outA)
	if strings.ReplaceAll(outA, dirA, "DIR") != strings.ReplaceAll(outB, dirB, "DIR") {
		t.Errorf("two builds of the same sources differ:\n%s\nand\n%s", outA, outB)
	}
	for _, s := range images.Shipped() {
		a, b := fileSum(t, filepath.Join(dirA, s.Name+".tar")), fileSum(t, filepath.Join(dirB, s.Name+".tar"))
		if a != b {
			t.Errorf("%s.tar differs between two builds: sha256 %x and %x", s.Name, a, b)
		}
		idx, err := images.ReadLayout(dirA, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(outA, s.Name+" "+d.String()+" ") {
			t.Errorf("images build printed no line for %s's index %s:\n%s", s.Name, d, outA)
		}
		checkIndex(t, s, idx)
	}

	// Pushed to a real registry, the images are there under the digests
	// build printed, by tag and by digest.
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/meshlet"
	var pushed bytes.Buffer
	if err := run(ctx, []string{"push", "-dir", dirB, "-registry", repo, "-tag", "test"}, &pushed); err != nil {
		t.Fatalf("images push: %v", err)
	}
	t.Logf("images push:\n%s", pushed.String())
	for _, s := range images.Shipped() {
		idx, err := images.ReadLayout(dirA, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := idx.Digest()
		line := repo + "/" + s.Name + ":test@" + want.String()
		if !strings.Contains(pushed.String(), line+"\n") {
			t.Errorf("images push did not print %s:\n%s", line, pushed.String())
		}
		for _, r := range []string{repo + "/" + s.Name + ":test", repo + "/" + s.Name + "@" + want.String()} {
			ref, err := name.ParseReference(r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := remote.Index(ref, remote.WithContext(ctx))
			if err != nil {
				t.Fatalf("pull %s: %v", r, err)
			}
			if d, _ := got.Digest(); d != want {
				t.Errorf("%s is %s, want %s", r, d, want)
			}
			// A client on arm64 resolves the index to the arm64 image.
			img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
			if err != nil {
				t.Fatalf("pull %s for linux/arm64: %v", r, err)
			}
			if cf, err := img.ConfigFile(); err != nil || cf.Architecture != "arm64" {
				t.Errorf("%s for linux/arm64: config %+v, %v", r, cf, err)
			}
		}
	}
}

// checkIndex checks one built index: its media type, annotations, one
// image per platform and each image (checkImage).
func checkIndex(t *testing.T, s images.Spec, idx v1.ImageIndex) {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex {
		t.Errorf("%s: index media type %s, want %s", s.Name, m.MediaType, types.OCIImageIndex)
	}
	checkAnnotations(t, s.Name+" index", m.Annotations)
	platforms := map[string]bool{}
	for _, desc := range m.Manifests {
		if desc.Platform == nil {
			t.Fatalf("%s: manifest %s has no platform", s.Name, desc.Digest)
		}
		platforms[desc.Platform.String()] = true
		if desc.MediaType != types.OCIManifestSchema1 {
			t.Errorf("%s %s: media type %s, want %s", s.Name, desc.Platform, desc.MediaType, types.OCIManifestSchema1)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, s, *desc.Platform, img)
	}
	if len(m.Manifests) != 2 || !platforms["linux/amd64"] || !platforms["linux/arm64"] {
		t.Errorf("%s: index platforms %v, want linux/amd64 and linux/arm64", s.Name, platforms)
	}
}

// checkAnnotations fails unless a (annotations or labels) say the build's
// version, revision, source and time.
func checkAnnotations(t *testing.T, what string, a map[string]string) {
	t.Helper()
	for k, v := range map[string]string{
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": testRevision,
		"org.opencontainers.image.source":   testSource,
		"org.opencontainers.image.created":  time.Unix(testEpoch, 0).UTC().Format(time.RFC3339),
	} {
		if a[k] != v {
			t.Errorf("%s: %s is %q, want %q", what, k, a[k], v)
		}
	}
}

// checkImage checks one platform's image: its config (platform, user,
// entrypoint, labels, time), its layers' media types, and its file
// system: base files, every member owned by 0:0 at the build's time, and
// the binary, an executable static ELF for the platform that, for this
// machine's architecture, runs.
func checkImage(t *testing.T, s images.Spec, p v1.Platform, img v1.Image) {
	t.Helper()
	what := s.Name + " " + p.String()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("%s: config platform %s/%s", what, cf.OS, cf.Architecture)
	}
	if want := map[string]string{"sidecar": "0:0", "injector": "1337:1337"}[s.Name]; cf.Config.User != want {
		t.Errorf("%s: user %q, want %q", what, cf.Config.User, want)
	}
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != s.Path {
		t.Errorf("%s: entrypoint %q, want [%s]", what, cf.Config.Entrypoint, s.Path)
	}
	if !cf.Created.Time.Equal(time.Unix(testEpoch, 0)) {
		t.Errorf("%s: created %v, want the epoch given", what, cf.Created)
	}
	checkAnnotations(t, what+" labels", cf.Config.Labels)
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	checkAnnotations(t, what+" manifest", m.Annotations)
	if m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("%s: config media type %s", what, m.Config.MediaType)
	}
	for _, l := range m.Layers {
		if l.MediaType != types.OCILayer {
			t.Errorf("%s: layer %s media type %s, want %s", what, l.Digest, l.MediaType, types.OCILayer)
		}
	}

	files := map[string][]byte{}
	modes := map[string]int64{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: read file system: %v", what, err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(time.Unix(testEpoch, 0)) {
			t.Errorf("%s: %s owned by %d:%d (%q:%q) at %v, want 0:0 at the epoch given", what, h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.TrimSuffix(h.Name, "/")], modes["/"+strings.TrimSuffix(h.Name, "/")] = b, h.Mode
	}
	if !strings.Contains(string(files["/etc/passwd"]), "meshlet:x:1337:1337:") || !strings.Contains(string(files["/etc/group"]), "meshlet:x:1337:") {
		t.Errorf("%s: no user and group 1337:\n%s\n%s", what, files["/etc/passwd"], files["/etc/group"])
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(files["/etc/ssl/certs/ca-certificates.crt"]) {
		t.Errorf("%s: /etc/ssl/certs/ca-certificates.crt holds no certificate", what)
	}
	if modes["/tmp"] != 0o1777 {
		t.Errorf("%s: /tmp mode %o, want 1777", what, modes["/tmp"])
	}
	bin, ok := files[s.Path]
	if !ok {
		t.Fatalf("%s: no %s in the image", what, s.Path)
	}
	if modes[s.Path] != 0o755 {
		t.Errorf("%s: %s mode %o, want 755", what, s.Path, modes[s.Path])
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s: %s is not an ELF file: %v", what, s.Path, err)
	}
	if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]; f.Machine != want {
		t.Errorf("%s: %s is for %v, want %v", what, s.Path, f.Machine, want)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: %s is dynamically linked (%v)", what, s.Path, prog.Type)
		}
	}
	if p.Architecture != runtime.GOARCH {
		return
	}
	exe := filepath.Join(t.TempDir(), s.Name)
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "usage") && !strings.Contains(string(out), "Usage") {
		t.Errorf("%s: %s --help: %v\n%s", what, s.Path, err, out)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// An image build does not know is refused before anything is built, the
// name in the error.
func TestBuildRefusesAnUnknownImage(t *testing.T) {
	err := run(context.Background(), []string{"build", "-dir", t.TempDir(), "-images", "sidecar,envoy"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `no image "envoy"`) {
		t.Fatalf("build -images sidecar,envoy: %v, want envoy named", err)
	}
}
