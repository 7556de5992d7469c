//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshlet-dev/meshlet/internal/images"
)

// NodeImages are the images the real nodes run, each as the
// digest-pinned reference (HOST/meshlet-e2e/NAME@sha256:...) of the index
// pushed to the suite's registry: what the kubelets pull.
type NodeImages struct {
	// Pause is the CRI sandbox image (containerd's sandbox_image).
	Pause string
	// Echo is the test app (e2e/images/echo).
	Echo string
	// Sidecar and Injector are built as make images builds them
	// (internal/images: linux/amd64 and linux/arm64), with -pgo=off.
	Sidecar, Injector string
}

// refs lists the references, by image name.
func (i NodeImages) refs() map[string]string {
	return map[string]string{"pause": i.Pause, "echo": i.Echo, "sidecar": i.Sidecar, "injector": i.Injector}
}

// imageRegistry is a real OCI registry, go-containerregistry's
// pkg/registry, served by the test process on loopback, where the nodes'
// containerds (host processes) pull from it over plain HTTP (hosts.toml,
// writeHostsTOML). It records the requests containerd made, to show what
// the nodes pulled.
type imageRegistry struct {
	// Host is the registry's host:port.
	Host string
	srv  *http.Server
	mu   sync.Mutex
	// pulls are containerd's requests: "GET /v2/... 200".
	pulls []string
}

// startRegistry serves a registry on 127.0.0.1 until the test ends.
func startRegistry(t *testing.T) *imageRegistry {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("image registry: listen: %v", err)
	}
	r := &imageRegistry{Host: l.Addr().String()}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rec, req)
		// containerd names itself (containerd/1.6.20...); the pushes
		// (go-containerregistry) are not pulls.
		if strings.HasPrefix(req.UserAgent(), "containerd/") {
			r.mu.Lock()
			r.pulls = append(r.pulls, fmt.Sprintf("%s %s %d", req.Method, req.URL.Path, rec.code))
			r.mu.Unlock()
		}
	})}
	go r.srv.Serve(l)
	t.Cleanup(func() { r.srv.Close() })
	return r
}

// statusRecorder keeps the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// containerdRequests is a copy of what containerd asked the registry.
func (r *imageRegistry) containerdRequests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.pulls...)
}

// writeHostsTOML writes containerd's registry host config for r under
// certsDir (the CRI plugin's registry config_path): r is reached over
// plain HTTP, for pulls and resolving tags to digests.
func (r *imageRegistry) writeHostsTOML(t *testing.T, certsDir string) {
	t.Helper()
	dir := filepath.Join(certsDir, r.Host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("containerd's registry config: %v", err)
	}
	writeFile(t, dir, "hosts.toml", fmt.Sprintf(`server = "http://%s"

[host."http://%s"]
  capabilities = ["pull", "resolve"]
`, r.Host, r.Host))
}

// mirroredRegistries are the registries whose images the nodes pull from
// the suite's registry under their own names (writeMirrorHostsTOML,
// pushMirrored): manifests that name upstream images, as the Gateway API
// conformance suite's do (registry.k8s.io/gateway-api/echo-advanced), run
// what the test built and pushed. No other registry is configured, and
// the machine reaches none.
var mirroredRegistries = []string{"registry.k8s.io"}

// writeMirrorHostsTOML writes containerd's host config for each of
// mirroredRegistries under certsDir, naming r as its server over plain
// HTTP: containerd tries a registry's own host only when its hosts.toml
// sets no server, so nothing is ever pulled from the upstream.
func (r *imageRegistry) writeMirrorHostsTOML(t *testing.T, certsDir string) {
	t.Helper()
	for _, upstream := range mirroredRegistries {
		dir := filepath.Join(certsDir, upstream)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("containerd's registry config for %s: %v", upstream, err)
		}
		writeFile(t, dir, "hosts.toml", fmt.Sprintf(`# %s is mirrored by the suite's registry: never pulled from the Internet
server = "http://%s"

[host."http://%s"]
  capabilities = ["pull", "resolve"]
`, upstream, r.Host, r.Host))
	}
}

// pushMirrored pushes idx to r under ref's repository and tag, where the
// nodes pull it as ref (whose registry must be one of mirroredRegistries),
// and returns ref's repository at idx's digest: the imageID the kubelet
// reports for a container of ref.
func (r *imageRegistry) pushMirrored(t *testing.T, idx v1.ImageIndex, ref name.Tag) name.Digest {
	t.Helper()
	if !slices.Contains(mirroredRegistries, ref.RegistryStr()) {
		t.Fatalf("push %s: the nodes pull %s from the Internet, not from the suite's registry (mirroredRegistries: %v)", ref, ref.RegistryStr(), mirroredRegistries)
	}
	local, err := name.NewTag(r.Host + "/" + ref.RepositoryStr() + ":" + ref.TagStr())
	if err != nil {
		t.Fatalf("push %s to the suite's registry: %v", ref, err)
	}
	d, err := images.Push(context.Background(), idx, local)
	if err != nil {
		t.Fatalf("push %s to the suite's registry as %s: %v", ref, local, err)
	}
	return ref.Context().Digest(d.String())
}

// buildImages builds the node images with internal/images and pushes each
// to r; it returns their digest-pinned references. The pause and echo
// images are for this machine's platform only; the sidecar and the
// injector for images.Platforms, as make images builds them, so that
// containerd resolves a multi-platform index to its own platform.
func (r *imageRegistry) buildImages(t *testing.T) NodeImages {
	t.Helper()
	root, _ := filepath.Abs("..")
	ctx := context.Background()
	meta := images.Meta{Version: "e2e", Source: "https://github.com/meshlet-dev/meshlet", Created: time.Unix(0, 0).UTC()}
	if out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		meta.Revision = strings.TrimSpace(string(out))
	}
	pause := images.Spec{Name: "pause", Package: "./e2e/images/pause", Path: "/pause"}
	echo := images.E2EApp
	var specs []images.Spec
	var idxs []v1.ImageIndex
	for _, b := range []struct {
		platforms []v1.Platform
		specs     []images.Spec
	}{
		{[]v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}}, []images.Spec{pause, echo}},
		{images.Platforms, []images.Spec{images.Sidecar, images.Injector}},
	} {
		built, err := images.Build(ctx, images.Options{Root: root, Platforms: b.platforms, PGO: "off", Meta: meta, WorkDir: t.TempDir()}, b.specs...)
		if err != nil {
			t.Fatalf("build the node images: %v", err)
		}
		specs, idxs = append(specs, b.specs...), append(idxs, built...)
	}
	refs := map[string]string{}
	for i, s := range specs {
		tag, err := name.NewTag(r.Host + "/meshlet-e2e/" + s.Name + ":e2e")
		if err != nil {
			t.Fatal(err)
		}
		d, err := images.Push(ctx, idxs[i], tag)
		if err != nil {
			t.Fatalf("push the node images to the suite's registry: %v", err)
		}
		refs[s.Name] = tag.Context().Digest(d.String()).String()
	}
	return NodeImages{Pause: refs["pause"], Echo: refs[echo.Name], Sidecar: refs["sidecar"], Injector: refs["injector"]}
}

// checkPulled fails unless every container of pods runs one of the
// suite's images, named by digest in the suite's registry (nothing comes
// from off the machine), and the kubelet reports as the container's
// imageID that same repository and digest: containerd pulled the index
// pushed, not an image it had by that name.
func (c *Cluster) checkPulled(t *testing.T, pods ...corev1.Pod) {
	t.Helper()
	ours := map[string]bool{}
	for _, ref := range c.Images.refs() {
		ours[ref] = true
	}
	for _, p := range pods {
		status := map[string]corev1.ContainerStatus{}
		for _, st := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			status[st.Name] = st
		}
		for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			if !ours[ctr.Image] {
				t.Errorf("pod %s container %s runs %s, not an image of the suite's registry by digest (%v)", p.Name, ctr.Name, ctr.Image, c.Images)
			}
			st, ok := status[ctr.Name]
			if !ok {
				t.Errorf("pod %s container %s has no status", p.Name, ctr.Name)
			} else if st.ImageID != ctr.Image {
				t.Errorf("pod %s container %s: the kubelet reports imageID %q, want the digest pushed: %s", p.Name, ctr.Name, st.ImageID, ctr.Image)
			}
		}
	}
}

// checkRegistryPulls fails unless the nodes' containerds fetched, from the
// suite's registry, each image's index by its digest and then the
// manifest of this machine's platform in it (and so pulled the images
// rather than finding them imported).
func (c *Cluster) checkRegistryPulls(t *testing.T) {
	t.Helper()
	for img, ref := range c.Images.refs() {
		d, err := name.NewDigest(ref)
		if err != nil {
			t.Fatal(err)
		}
		c.checkFetched(t, img, d)
	}
	t.Logf("the nodes' containerds made %d requests to the registry at %s; every image's index and %s manifest fetched by digest", len(c.registry.containerdRequests()), c.registry.Host, runtime.GOARCH)
}

// checkFetched fails unless the nodes' containerds fetched the index d
// (a repository of the suite's registry, or of a mirrored one, at a
// digest) from the suite's registry by its digest, and then the manifest
// of this machine's platform in it.
func (c *Cluster) checkFetched(t *testing.T, img string, d name.Digest) {
	t.Helper()
	reqs := c.registry.containerdRequests()
	repo := d.Context().RepositoryStr()
	fetched := func(digest string) bool {
		return slices.Contains(reqs, "GET /v2/"+repo+"/manifests/"+digest+" 200")
	}
	if !fetched(d.DigestStr()) {
		t.Errorf("containerd never fetched %s's index %s from the registry; its requests:\n%s", img, d.DigestStr(), strings.Join(reqs, "\n"))
		return
	}
	local, err := name.NewDigest(c.registry.Host + "/" + repo + "@" + d.DigestStr())
	if err != nil {
		t.Fatal(err)
	}
	plat, err := c.platformManifest(local)
	if err != nil {
		t.Fatal(err)
	}
	if !fetched(plat) {
		t.Errorf("containerd fetched %s's index but not its %s/%s manifest %s; its requests:\n%s", img, "linux", runtime.GOARCH, plat, strings.Join(reqs, "\n"))
	}
}

// platformManifest is the digest of this machine's platform's manifest in
// the index d, as the registry serves it.
func (c *Cluster) platformManifest(d name.Digest) (string, error) {
	idx, err := remote.Index(d)
	if err != nil {
		return "", fmt.Errorf("read %s from the suite's registry: %w", d, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	for _, desc := range m.Manifests {
		if desc.Platform != nil && desc.Platform.OS == "linux" && desc.Platform.Architecture == runtime.GOARCH {
			return desc.Digest.String(), nil
		}
	}
	return "", errors.New(d.String() + " has no manifest for linux/" + runtime.GOARCH)
}
