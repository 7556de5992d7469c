package mtls

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Errors a CAStore returns (wrapped) so LoadOrCreateCA can tell "absent" and
// "lost the race" from real failures.
var (
	// ErrCANotFound: the store holds no CA material.
	ErrCANotFound = errors.New("mtls: no CA material stored")
	// ErrCAExists: Create found CA material already stored.
	ErrCAExists = errors.New("mtls: CA material already stored")
)

// Keys of CA material in a Kubernetes Secret's data (see package kubeca) and
// in a FileCAStore file.
// The names follow Istio's cacerts Secret, which operators know.
const (
	CAKeyRootCert         = "root-cert.pem" // CAMaterial.RootCert
	CAKeyRootKey          = "root-key.pem"  // CAMaterial.RootKey
	CAKeyIntermediateCert = "ca-cert.pem"   // CAMaterial.IntermediateCert
	CAKeyIntermediateKey  = "ca-key.pem"    // CAMaterial.IntermediateKey
)

// CAStore persists the mesh CA so that it is created once and shared by
// every control-plane replica.
type CAStore interface {
	// Load returns the stored material, or an error wrapping ErrCANotFound
	// when there is none.
	Load(ctx context.Context) (*CAMaterial, error)
	// Create stores m only if no material is stored yet, atomically; it
	// returns an error wrapping ErrCAExists otherwise.
	Create(ctx context.Context, m *CAMaterial) error
}

// FileCAStore keeps CA material in one JSON file (keys CAKey*, PEM values),
// mode 0600. Create is atomic: the file is written aside and hard-linked into
// place, which fails if it already exists.
type FileCAStore struct {
	// Path is the file's path.
	Path string
}

// Load implements CAStore.
func (s *FileCAStore) Load(ctx context.Context) (*CAMaterial, error) {
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("mtls: CA file %s: %w", s.Path, ErrCANotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("mtls: read CA file: %w", err)
	}
	var data map[string]string
	if err := json.Unmarshal(b, &data); err != nil {
		return nil, fmt.Errorf("mtls: CA file %s: %w", s.Path, err)
	}
	raw := make(map[string][]byte, len(data))
	for k, v := range data {
		raw[k] = []byte(v)
	}
	m := CAMaterialFromData(raw)
	if len(m.RootCert) == 0 {
		return nil, fmt.Errorf("mtls: CA file %s exists but has no %q: refusing to regenerate", s.Path, CAKeyRootCert)
	}
	return m, nil
}

// Create implements CAStore.
func (s *FileCAStore) Create(ctx context.Context, m *CAMaterial) error {
	data := map[string]string{}
	for k, v := range m.Data() {
		data[k] = string(v)
	}
	b, err := json.MarshalIndent(data, "", "  ")
	if err != nil {
		return fmt.Errorf("mtls: encode CA material for %s: %w", s.Path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.Path), ".ca-*.tmp")
	if err != nil {
		return fmt.Errorf("mtls: create CA file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("mtls: write CA file %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("mtls: sync CA file %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("mtls: close CA file %s: %w", tmp.Name(), err)
	}
	if err := os.Link(tmp.Name(), s.Path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("mtls: CA file %s: %w", s.Path, ErrCAExists)
		}
		return fmt.Errorf("mtls: install CA file: %w", err)
	}
	return nil
}

// Data returns the material keyed by the CAKey* names (absent parts
// omitted), as a Secret's data holds it.
func (m *CAMaterial) Data() map[string][]byte {
	data := map[string][]byte{CAKeyRootCert: m.RootCert}
	for k, v := range map[string][]byte{CAKeyRootKey: m.RootKey, CAKeyIntermediateCert: m.IntermediateCert, CAKeyIntermediateKey: m.IntermediateKey} {
		if len(v) > 0 {
			data[k] = v
		}
	}
	return data
}

// CAMaterialFromData is the inverse of CAMaterial.Data.
func CAMaterialFromData(data map[string][]byte) *CAMaterial {
	return &CAMaterial{
		RootCert:         data[CAKeyRootCert],
		RootKey:          data[CAKeyRootKey],
		IntermediateCert: data[CAKeyIntermediateCert],
		IntermediateKey:  data[CAKeyIntermediateKey],
	}
}
