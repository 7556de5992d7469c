package images

import (
	"archive/tar"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The echo-advanced image is what the conformance suite's manifests
// expect of it: the server as entrypoint, the client on PATH, the TLS
// pair their args name, readable by its non-root user; and two builds are
// the same image.
func TestEchoAdvanced(t *testing.T) {
	dir := t.TempDir()
	server, client := filepath.Join(dir, "server"), filepath.Join(dir, "client")
	for _, f := range []string{server, client} {
		if err := os.WriteFile(f, []byte("binary "+filepath.Base(f)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := v1.Platform{OS: "linux", Architecture: "amd64"}
	m := Meta{Version: "test", Created: time.Unix(0, 0).UTC()}
	idx, err := EchoAdvanced(m, p, server, client)
	if err != nil {
		t.Fatal(err)
	}
	again, err := EchoAdvanced(m, p, server, client)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := idx.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds from the same binaries: digests %s and %s", d1, d2)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.Architecture != "amd64" {
		t.Fatalf("index manifests %+v, want one, linux/amd64", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/server"}) || cf.Config.User != "1338:1338" || len(cf.Config.Cmd) != 0 {
		t.Errorf("config: entrypoint %q cmd %q user %q, want [/usr/local/bin/server], none, 1338:1338", cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User)
	}
	if !slices.ContainsFunc(cf.Config.Env, func(e string) bool {
		return strings.HasPrefix(e, "PATH=") && slices.Contains(strings.Split(strings.TrimPrefix(e, "PATH="), ":"), "/usr/local/bin")
	}) {
		t.Errorf("env %q: /usr/local/bin is not on PATH (the suite execs client by name)", cf.Config.Env)
	}

	files := map[string]*tar.Header{}
	data := map[string][]byte{}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			files[h.Name], data[h.Name] = h, b
		}
		rc.Close()
	}
	for name, want := range map[string]struct {
		mode int64
		data string
	}{
		"usr/local/bin/server": {0o755, "binary server"},
		"usr/local/bin/client": {0o755, "binary client"},
		"cert.crt":             {0o644, ""},
		"cert.key":             {0o644, ""},
	} {
		h, ok := files[name]
		switch {
		case !ok:
			t.Errorf("no /%s in the image", name)
		case h.Mode != want.mode || h.Uid != 0 || h.Gid != 0:
			t.Errorf("/%s: mode %o owner %d:%d, want %o 0:0", name, h.Mode, h.Uid, h.Gid, want.mode)
		case want.data != "" && string(data[name]) != want.data:
			t.Errorf("/%s holds %q, want %q", name, data[name], want.data)
		}
	}
	if !strings.Contains(string(data["etc/passwd"]), "application:x:1338:1338:") {
		t.Errorf("/etc/passwd has no uid 1338:\n%s", data["etc/passwd"])
	}

	// The pair serves TLS for the Services' names, as the echo server
	// loads it (tls.LoadX509KeyPair of the two files).
	crtFile, keyFile := filepath.Join(dir, "cert.crt"), filepath.Join(dir, "cert.key")
	os.WriteFile(crtFile, data["cert.crt"], 0o644)
	os.WriteFile(keyFile, data["cert.key"], 0o644)
	pair, err := tls.LoadX509KeyPair(crtFile, keyFile)
	if err != nil {
		t.Fatalf("the image's /cert.crt and /cert.key: %v", err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(data["cert.crt"])
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", l.Addr().String(),
		&tls.Config{RootCAs: roots, ServerName: "echo-v2.gateway-conformance-mesh.svc.cluster.local"})
	if err != nil {
		t.Fatalf("TLS to a server with the image's pair, verified for echo-v2.gateway-conformance-mesh.svc.cluster.local: %v", err)
	}
	conn.Close()

	crt2, key2, err := EchoAdvancedCert()
	if err != nil || string(crt2) != string(data["cert.crt"]) || string(key2) != string(data["cert.key"]) {
		t.Errorf("EchoAdvancedCert gives another pair at a second call (err %v): the image is not reproducible", err)
	}
}
