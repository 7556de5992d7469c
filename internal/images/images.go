// Package images builds meshlet's container images without a container
// engine, with go-containerregistry: each image is a static Go binary on a
// minimal base (a CA bundle, /etc/passwd and /etc/group naming the mesh's
// non-root user, /tmp), one OCI image per platform under an OCI image
// index. The images are reproducible: the same sources, Go toolchain and
// Meta give the same digests (fixed timestamps, sorted tar members,
// owner 0:0, fixed modes). hack/images is its command line (make images,
// make push); the e2e suite builds the images its nodes pull with it,
// the Gateway API conformance suite's echo image too (EchoAdvanced).
// docs/reference/images.md describes the result.
package images

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// UID is the mesh's non-root user and group id, named "meshlet" in the
// images' /etc/passwd and /etc/group: the injector runs as it, and the
// sidecar switches to it once its eBPF programs are attached (the
// injector's -proxy-uid default, webhook.DefaultProxyUID).
const UID = 1337

// Spec is one image: the Go main package it runs and how.
type Spec struct {
	// Name is the image's name, the last element of its repository.
	Name string
	// Package is the Go main package, relative to the module root.
	Package string
	// Path is where the binary is in the image; it is the entrypoint.
	Path string
	// User is the config's user as "uid:gid"; empty means root.
	User string
	// Description is the image's org.opencontainers.image.description.
	Description string
}

// binary is the file name go build gives Spec's binary in its -o folder.
func (s Spec) binary() string { return path.Base(s.Package) }

// Sidecar is the per-pod proxy's image. Its user is root: the sidecar
// must attach its eBPF programs with CAP_BPF and CAP_NET_ADMIN before it
// switches to UID itself (sidecar run -proxy-uid; the injected container
// says runAsUser 0 with only those capabilities, and SETUID and SETGID).
var Sidecar = Spec{Name: "sidecar", Package: "./cmd/sidecar", Path: "/usr/local/bin/sidecar", User: "0:0",
	Description: "meshlet's per-pod proxy (sidecar run), injected by the meshlet injector"}

// Injector is the control plane's image (injector serve). It needs no
// privilege, so it runs as UID.
var Injector = Spec{Name: "injector", Package: "./cmd/injector", Path: "/usr/local/bin/injector", User: strconv.Itoa(UID) + ":" + strconv.Itoa(UID),
	Description: "meshlet's control plane: injection webhook, mesh CA with SDS, xDS discovery"}

// E2EApp is the end-to-end tests' app (e2e/images/echo: an echo server,
// and a client of $TARGETS), which the cluster suite runs on any cluster.
// Not shipped. Its user is root, as an app's: the redirect exempts UID.
var E2EApp = Spec{Name: "meshlet-e2e-app", Package: "./e2e/images/echo", Path: "/echo",
	Description: "meshlet's end-to-end test app: an echo server and an HTTP client (not for production)"}

// Shipped lists the images make images builds and make push pushes.
func Shipped() []Spec { return []Spec{Sidecar, Injector} }

// Platforms are the platforms of the shipped images.
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// Meta is what the images say about where they come from, as OCI
// annotations (index and manifests) and config labels.
type Meta struct {
	// Version is org.opencontainers.image.version (make: git describe).
	Version string
	// Revision is org.opencontainers.image.revision, the git commit.
	Revision string
	// Source is org.opencontainers.image.source, the repository's URL.
	Source string
	// Created is every timestamp in the images (config, history, file
	// times) and org.opencontainers.image.created: SOURCE_DATE_EPOCH, or
	// the Unix epoch, never the time of the build.
	Created time.Time
}

// annotations are m's and s's OCI annotation keys and values.
func (m Meta) annotations(s Spec) map[string]string {
	a := map[string]string{
		"org.opencontainers.image.title":    "meshlet-" + s.Name,
		"org.opencontainers.image.created":  m.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	for k, v := range map[string]string{"description": s.Description, "version": m.Version, "revision": m.Revision, "source": m.Source} {
		if v != "" {
			a["org.opencontainers.image."+k] = v
		}
	}
	return a
}

// Options are how Build builds.
type Options struct {
	// Root is the module's root folder, where go build runs.
	Root string
	// Platforms to build for; every image gets one manifest per platform.
	Platforms []v1.Platform
	// PGO is go build's -pgo: "auto" (the sidecar's cmd/sidecar/default.pgo,
	// as make sidecar builds it) or "off" (what the tests build with, so
	// they share one compile of the dependency tree).
	PGO string
	// Meta goes into every image.
	Meta Meta
	// WorkDir receives the binaries, one folder per platform.
	WorkDir string
}

// Build compiles the specs' packages for every platform of o (one go build
// per platform) and packs each spec into an index, in the order of specs.
func Build(ctx context.Context, o Options, specs ...Spec) ([]v1.ImageIndex, error) {
	if len(o.Platforms) == 0 || o.WorkDir == "" {
		return nil, fmt.Errorf("images: build %d images: need platforms (have %d) and a work folder (have %q)", len(specs), len(o.Platforms), o.WorkDir)
	}
	pkgs := make([]string, len(specs))
	seen := map[string]bool{}
	for i, s := range specs {
		if seen[s.binary()] {
			return nil, fmt.Errorf("images: two images build a binary named %s", s.binary())
		}
		seen[s.binary()] = true
		pkgs[i] = s.Package
	}
	dirs := make([]string, len(o.Platforms))
	for i, p := range o.Platforms {
		dirs[i] = filepath.Join(o.WorkDir, p.OS+"-"+p.Architecture)
		if err := GoBuild(ctx, o.Root, dirs[i], o.PGO, p, pkgs...); err != nil {
			return nil, err
		}
	}
	out := make([]v1.ImageIndex, len(specs))
	for i, s := range specs {
		bins := make([]string, len(dirs))
		for j, d := range dirs {
			bins[j] = filepath.Join(d, s.binary())
		}
		idx, err := Index(s, o.Meta, o.Platforms, bins)
		if err != nil {
			return nil, err
		}
		out[i] = idx
	}
	return out, nil
}

// GoBuild compiles pkgs (main packages, relative to root) for platform p
// into dir, as make sidecar builds the sidecar: static (CGO_ENABLED=0),
// -trimpath, -tags grpcnotrace, with pgo as -pgo.
func GoBuild(ctx context.Context, root, dir, pgo string, p v1.Platform, pkgs ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("images: go build %s for %s: %w", strings.Join(pkgs, " "), p, err)
	}
	if pgo == "" {
		pgo = "auto"
	}
	args := append([]string{"build", "-trimpath", "-tags", "grpcnotrace", "-pgo=" + pgo, "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("images: go build %s for %s: %w\n%s", strings.Join(pkgs, " "), p, err, out)
	}
	return nil
}

// Index packs spec s into an OCI index with one image per platform:
// binaries[i] is s's binary built for platforms[i].
func Index(s Spec, m Meta, platforms []v1.Platform, binaries []string) (v1.ImageIndex, error) {
	if len(platforms) != len(binaries) {
		return nil, fmt.Errorf("images: %s: %d platforms but %d binaries", s.Name, len(platforms), len(binaries))
	}
	base, err := baseLayer(m.Created, meshletAccount)
	if err != nil {
		return nil, err
	}
	var adds []mutate.IndexAddendum
	for i, p := range platforms {
		b, err := os.ReadFile(binaries[i])
		if err != nil {
			return nil, fmt.Errorf("images: %s for %s: %w", s.Name, p, err)
		}
		img, err := image(s, m, p, base, []entry{{name: s.Path, mode: 0o755, data: b}},
			"go build -trimpath -tags grpcnotrace "+s.Package+" (CGO_ENABLED=0 GOOS="+p.OS+" GOARCH="+p.Architecture+") to "+s.Path)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx := mutate.AppendManifests(empty.Index, adds...)
	return mutate.Annotations(idx, m.annotations(s)).(v1.ImageIndex), nil
}

// image is s for platform p: the base layer, then a layer holding files
// (the binary at s.Path, and whatever else), made as createdBy says
// (its history; the base is the same blob in every image).
func image(s Spec, m Meta, p v1.Platform, base v1.Layer, files []entry, createdBy string) (v1.Image, error) {
	top, err := layer(files, m.Created)
	if err != nil {
		return nil, fmt.Errorf("images: %s for %s: files layer: %w", s.Name, p, err)
	}
	created := v1.Time{Time: m.Created.UTC()}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: "meshlet internal/images: CA bundle, /etc/passwd, /etc/group, /tmp", Comment: "base"}},
		mutate.Addendum{Layer: top, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: "meshlet internal/images: " + createdBy}})
	if err != nil {
		return nil, fmt.Errorf("images: %s for %s: append layers: %w", s.Name, p, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("images: %s for %s: config: %w", s.Name, p, err)
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config = v1.Config{
		Entrypoint: []string{s.Path},
		User:       s.User,
		WorkingDir: "/",
		// Go reads the CA bundle from /etc/ssl/certs/ca-certificates.crt
		// by itself; SSL_CERT_FILE names it for anything else.
		Env:    []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + caBundlePath},
		Labels: m.annotations(s),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("images: %s for %s: config: %w", s.Name, p, err)
	}
	return mutate.Annotations(img, m.annotations(s)).(v1.Image), nil
}

// caBundlePath is where the base layer puts the CA bundle: the path Go,
// OpenSSL and most Linux programs read on Debian and its derivatives.
const caBundlePath = "/etc/ssl/certs/ca-certificates.crt"

// account is a user of an image besides root, in /etc/passwd, with the
// group of the same name and id in /etc/group.
type account struct {
	name string
	id   int
}

// meshletAccount is UID's account in the shipped images.
var meshletAccount = account{name: "meshlet", id: UID}

// baseLayer is what every image has below its binary: the CA bundle (Go's
// fallback roots, golang.org/x/crypto/x509roots/fallback, pinned in go.mod
// so that the bundle, and so the digest, depends on the sources alone and
// not on the building machine's ca-certificates), /etc/passwd and
// /etc/group with root and user (so that its uid has a name for whatever
// looks it up), and a world-writable sticky /tmp for Go's
// os.TempDir.
func baseLayer(mtime time.Time, user account) (v1.Layer, error) {
	var certs bytes.Buffer
	for root := range bundle.Roots() {
		// A root the bundle constrains (Mozilla's distrust-after dates)
		// would lose its constraint in a PEM file, and be trusted in full:
		// it is left out.
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&certs, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, fmt.Errorf("images: CA bundle: %w", err)
		}
	}
	id := strconv.Itoa(user.id)
	l, err := layer([]entry{
		{name: caBundlePath, mode: 0o644, data: certs.Bytes()},
		{name: "/etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" + user.name + ":x:" + id + ":" + id + ":" + user.name + ":/nonexistent:/sbin/nologin\n")},
		{name: "/etc/group", mode: 0o644, data: []byte("root:x:0:\n" + user.name + ":x:" + id + ":\n")},
		{name: "/tmp/", mode: 0o1777},
	}, mtime)
	if err != nil {
		return nil, fmt.Errorf("images: base layer: %w", err)
	}
	return l, nil
}

// layer is a gzip-compressed OCI layer of entries (writeTar).
func layer(entries []entry, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	if err := writeTar(&buf, entries, mtime); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
