// Package kubeca keeps the mesh CA in a Kubernetes Secret, so that every
// control-plane replica shares one CA and a restart finds the same root. It
// is separate from mtls so that the sidecar, which uses mtls but never talks
// to the Kubernetes API, does not link client-go.
package kubeca

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet-dev/meshlet/mtls"
)

// SecretStore is an mtls.CAStore backed by a Secret (type Opaque, data keys
// mtls.CAKey*). Create relies on the API server refusing to create a Secret
// that exists, so replicas racing at first start agree on one CA.
type SecretStore struct {
	// Client talks to the API server; it needs get and create on secrets
	// in Namespace.
	Client kubernetes.Interface
	// Namespace and Name locate the Secret, e.g. meshlet-system/meshlet-ca.
	Namespace, Name string
}

var _ mtls.CAStore = (*SecretStore)(nil)

// Load implements mtls.CAStore.
func (s *SecretStore) Load(ctx context.Context) (*mtls.CAMaterial, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("kubeca: CA Secret %s/%s: %w", s.Namespace, s.Name, mtls.ErrCANotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("kubeca: get CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	m := mtls.CAMaterialFromData(sec.Data)
	if len(m.RootCert) == 0 {
		return nil, fmt.Errorf("kubeca: CA Secret %s/%s exists but has no %q: refusing to regenerate", s.Namespace, s.Name, mtls.CAKeyRootCert)
	}
	return m, nil
}

// Create implements mtls.CAStore.
func (s *SecretStore) Create(ctx context.Context, m *mtls.CAMaterial) error {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      s.Name,
			Namespace: s.Namespace,
			Labels:    map[string]string{"app.kubernetes.io/managed-by": "meshlet", "app.kubernetes.io/component": "mesh-ca"},
		},
		Type: corev1.SecretTypeOpaque,
		Data: m.Data(),
	}
	_, err := s.Client.CoreV1().Secrets(s.Namespace).Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubeca: CA Secret %s/%s: %w", s.Namespace, s.Name, mtls.ErrCAExists)
	}
	if err != nil {
		return fmt.Errorf("kubeca: create CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}
