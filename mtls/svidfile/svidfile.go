// Package svidfile keeps a certificate store supplied from files another
// agent writes and rotates: SPIRE's spiffe-helper, cert-manager's
// csi-driver-spiffe or anything else that drops a PEM certificate chain,
// private key and trust bundle in a directory, as Envoy's path-based SDS
// reads them.
//
// The directory is polled with stat(2) rather than watched with inotify:
// the agents replace files by rename or, on a Kubernetes projected volume,
// by swapping the ..data symlink, and a stat that follows the links sees
// both on any filesystem without re-arming watches after each swap. Three
// stats a second cost nothing next to a rotation every few hours.
package svidfile

import (
	"bytes"
	"context"
	"crypto"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/meshlet-dev/meshlet/mtls"
)

// Default file names are spiffe-helper's (svid_file_name, svid_key_file_name,
// svid_bundle_file_name); csi-driver-spiffe's are tls.crt, tls.key and ca.crt.
const (
	DefaultCertFile   = "svid.pem"
	DefaultKeyFile    = "svid_key.pem"
	DefaultBundleFile = "svid_bundle.pem"
	// DefaultInterval is how often the files are checked for a change.
	DefaultInterval = time.Second
	// tornGrace is how long a refused set stands before it is logged:
	// an agent writing the files one by one is done well within it,
	// however often they are checked.
	tornGrace = time.Second
)

// Config configures a Watcher.
type Config struct {
	// Dir holds the three files. Required.
	Dir string
	// CertFile (the chain, leaf first), KeyFile (PKCS#8, SEC 1 or PKCS#1)
	// and BundleFile (the trust domain's CA certificates) are names in Dir;
	// defaults DefaultCertFile, DefaultKeyFile and DefaultBundleFile.
	CertFile, KeyFile, BundleFile string
	// ID, when set, is the SPIFFE ID the certificate must name (sidecar
	// run -identity): a set naming another is refused, so that an agent
	// writing the wrong workload's identity cannot give the pod it.
	ID spiffeid.ID
	// Store receives the certificate and bundle. Required.
	Store *mtls.Store
	// Interval between checks for a change; default DefaultInterval.
	Interval time.Duration
	// Now is the clock expiry is checked against; default time.Now.
	Now func() time.Time
	// Logger receives installs and refusals; default slog.Default().
	Logger *slog.Logger
}

// Watcher installs the files' identity into its store whenever they change;
// a set that does not make a valid identity is refused and the store keeps
// the last good one.
type Watcher struct {
	cfg   Config
	log   *slog.Logger
	paths [3]string // cert, key, bundle
	seen  [3]os.FileInfo
}

// New checks cfg and applies its defaults.
func New(cfg Config) (*Watcher, error) {
	if cfg.Dir == "" {
		return nil, errors.New("svidfile: config: no Dir")
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("svidfile: config for %s: no Store", cfg.Dir)
	}
	if cfg.CertFile == "" {
		cfg.CertFile = DefaultCertFile
	}
	if cfg.KeyFile == "" {
		cfg.KeyFile = DefaultKeyFile
	}
	if cfg.BundleFile == "" {
		cfg.BundleFile = DefaultBundleFile
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	w := &Watcher{cfg: cfg, log: cfg.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	w.log = w.log.With("component", "identity-files", "dir", cfg.Dir)
	for i, name := range []string{cfg.CertFile, cfg.KeyFile, cfg.BundleFile} {
		w.paths[i] = filepath.Join(cfg.Dir, name)
	}
	return w, nil
}

// Run checks the files now and then every Interval until ctx ends, and
// returns ctx.Err().
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	var refused error // the set as it stands was refused, not yet logged
	var refusedAt time.Time
	for {
		switch {
		case w.changed():
			refused, refusedAt = w.Load(), time.Now()
			if refused != nil {
				// The agents write the files one by one, so a set caught
				// half-written is refused quietly; it is logged only if
				// it is still the set at a check tornGrace later.
				w.log.Debug("identity files refused; checking again", "error", refused)
			}
		case refused != nil && time.Since(refusedAt) >= tornGrace:
			w.log.Warn("refused identity files; keeping the last good identity", "error", refused, "current", w.cfg.Store.Current().ID.String())
			refused = nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// changed reports whether any file differs (another inode, size or mtime)
// from the last check; a missing file counts as unchanged until it appears,
// so that an agent that has not written yet is not reported every second.
func (w *Watcher) changed() bool {
	changed := false
	for i, p := range w.paths {
		fi, err := os.Stat(p) // follows ..data symlinks
		if err != nil {
			if w.seen[i] != nil {
				w.seen[i], changed = nil, true
			}
			continue
		}
		old := w.seen[i]
		if old == nil || !os.SameFile(old, fi) || old.Size() != fi.Size() || !old.ModTime().Equal(fi.ModTime()) {
			w.seen[i], changed = fi, true
		}
	}
	return changed
}

// Load reads the three files and installs them if they make a valid
// identity: the key matches the leaf, which names one SPIFFE ID (Config.ID
// when set), is not expired and chains to the bundle. An error names the file at fault and
// leaves the store unchanged.
func (w *Watcher) Load() error {
	var raw [3][]byte
	for i, p := range w.paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("svidfile: read %s: %w", p, err)
		}
		raw[i] = b
	}
	certPath, keyPath, bundlePath := w.paths[0], w.paths[1], w.paths[2]
	chain, err := mtls.ParseCertificatesPEM(raw[0])
	if err != nil {
		return fmt.Errorf("svidfile: certificate %s: %w", certPath, err)
	}
	if len(chain) == 0 {
		return fmt.Errorf("svidfile: certificate %s: no certificate in it", certPath)
	}
	leaf := chain[0]
	id, err := x509svid.IDFromCert(leaf)
	if err != nil {
		return fmt.Errorf("svidfile: certificate %s: %w", certPath, err)
	}
	if !w.cfg.ID.IsZero() && id != w.cfg.ID {
		return fmt.Errorf("svidfile: certificate %s names %s, want %s", certPath, id, w.cfg.ID)
	}
	if now := w.cfg.Now(); now.After(leaf.NotAfter) {
		return fmt.Errorf("svidfile: certificate %s (%s) expired at %s", certPath, id, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := mtls.ParsePrivateKeyPEM(raw[1])
	if err != nil {
		return fmt.Errorf("svidfile: key %s: %w", keyPath, err)
	}
	if pk, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pk.Equal(key.Public()) {
		// Usually a half-written rotation: the next change completes it.
		return fmt.Errorf("svidfile: key %s does not match certificate %s (%s)", keyPath, certPath, id)
	}
	bundle, err := x509bundle.Parse(id.TrustDomain(), raw[2])
	if err != nil {
		return fmt.Errorf("svidfile: bundle %s: %w", bundlePath, err)
	}
	if bundle.Empty() {
		return fmt.Errorf("svidfile: bundle %s: no CA certificate in it", bundlePath)
	}
	if _, _, err := x509svid.Verify(chain, bundle, x509svid.WithTime(w.cfg.Now())); err != nil {
		return fmt.Errorf("svidfile: certificate %s does not verify against bundle %s: %w", certPath, bundlePath, err)
	}
	prev := w.cfg.Store.Current()
	snap, changed, err := w.cfg.Store.Update(mtls.Update{Chain: chain, Key: key, Bundles: []*x509bundle.Bundle{bundle}})
	if err != nil {
		return fmt.Errorf("svidfile: install %s: %w", certPath, err)
	}
	if changed {
		newCert := prev.Certificate == nil || !bytes.Equal(prev.Certificate.Leaf.Raw, leaf.Raw)
		w.log.Info("installed identity from files", "spiffe_id", snap.ID.String(), "serial", leaf.SerialNumber.Text(16),
			"not_after", snap.NotAfter(), "new_certificate", newCert)
	}
	return nil
}
