package images

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// EchoAdvancedUID is the user the echo-advanced image runs as, as
// upstream (Istio's echo app: useradd --uid 1338 application). Not UID:
// the redirect exempts the sidecar's uid, so an app running as 1337 would
// bypass its sidecar.
const EchoAdvancedUID = 1338

// EchoAdvanced is the Gateway API conformance suite's echo-advanced image
// (what its mesh manifests run), packed as upstream packs Istio's echo
// app: Istio's echo server as the entrypoint (/usr/local/bin/server, the
// manifests' args are its flags), its client at /usr/local/bin/client on
// PATH (the suite execs `client URL` in the container), and the TLS pair
// the manifests' --crt=/cert.crt --key=/cert.key name, without which the
// server exits. server and client are those binaries built for p, static
// (testtool.IstioEcho). The index holds p's image only: the e2e nodes are
// this machine's platform.
func EchoAdvanced(m Meta, p v1.Platform, server, client string) (v1.ImageIndex, error) {
	s := Spec{Name: "echo-advanced", Package: "istio.io/istio/pkg/test/echo/cmd/server", Path: "/usr/local/bin/server",
		User:        fmt.Sprintf("%d:%d", EchoAdvancedUID, EchoAdvancedUID),
		Description: "Istio's echo server and client as the Gateway API conformance suite's echo-advanced image (test only)"}
	var files []entry
	for _, f := range []struct{ path, bin string }{{s.Path, server}, {"/usr/local/bin/client", client}} {
		b, err := os.ReadFile(f.bin)
		if err != nil {
			return nil, fmt.Errorf("images: %s for %s: %w", s.Name, p, err)
		}
		files = append(files, entry{name: f.path, mode: 0o755, data: b})
	}
	crt, key, err := EchoAdvancedCert()
	if err != nil {
		return nil, err
	}
	// Readable by the non-root user: the files are owned by root.
	files = append(files, entry{name: "/cert.crt", mode: 0o644, data: crt}, entry{name: "/cert.key", mode: 0o644, data: key})
	base, err := baseLayer(m.Created, account{name: "application", id: EchoAdvancedUID})
	if err != nil {
		return nil, err
	}
	img, err := image(s, m, p, base, files, "Istio's echo server and client to /usr/local/bin, a self-signed /cert.crt and /cert.key")
	if err != nil {
		return nil, err
	}
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	return mutate.Annotations(idx, m.annotations(s)).(v1.ImageIndex), nil
}

// EchoAdvancedCert is echo-advanced's /cert.crt and /cert.key (PEM): a
// self-signed Ed25519 certificate for the conformance suite's echo
// Services, the same bytes at every build (the key comes from a fixed
// seed, Ed25519 signatures are deterministic and every field is fixed)
// so that the image is reproducible. It is a test fixture, not a secret:
// no mesh test calls the TLS port, upstream's is Istio's test
// certificate.
func EchoAdvancedCert() (crt, key []byte, err error) {
	seed := sha256.Sum256([]byte("meshlet internal/images: echo-advanced /cert.key"))
	priv := ed25519.NewKeyFromSeed(seed[:])
	const ns = "gateway-conformance-mesh"
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "echo." + ns + ".svc.cluster.local"},
		DNSNames: []string{"echo", "echo-v1", "echo-v2", "*." + ns, "*." + ns + ".svc", "*." + ns + ".svc.cluster.local",
			"*." + ns + "-consumer", "*." + ns + "-consumer.svc", "*." + ns + "-consumer.svc.cluster.local"},
		NotBefore: time.Unix(0, 0).UTC(),
		// RFC 5280's "no well-defined expiration date".
		NotAfter:    time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, priv.Public(), priv)
	if err != nil {
		return nil, nil, fmt.Errorf("images: echo-advanced certificate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("images: echo-advanced key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
}
