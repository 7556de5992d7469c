package kubeca

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshlet-dev/meshlet/mtls"
)

// These tests run against client-go's fake clientset, which stands in for a
// real kube-apiserver: this session has none. Like the API server, the fake
// object tracker refuses to create a Secret that exists, which is what the
// race between replicas relies on. The real-API-server test comes with the
// injector issue.

var opts = mtls.CAOptions{TrustDomain: spiffeid.RequireTrustDomainFromString("cluster.local"), Intermediate: true}

func store(c *fake.Clientset) *SecretStore {
	return &SecretStore{Client: c, Namespace: "meshlet-system", Name: "meshlet-ca"}
}

func TestSecretStoreOnceAndRestart(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	if _, err := store(client).Load(ctx); !errors.Is(err, mtls.ErrCANotFound) {
		t.Fatalf("Load without a Secret: %v, want ErrCANotFound", err)
	}
	first, created, err := mtls.LoadOrCreateCA(ctx, store(client), opts)
	if err != nil || !created {
		t.Fatalf("first: created=%v err=%v", created, err)
	}
	sec, err := client.CoreV1().Secrets("meshlet-system").Get(ctx, "meshlet-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{mtls.CAKeyRootCert, mtls.CAKeyRootKey, mtls.CAKeyIntermediateCert, mtls.CAKeyIntermediateKey} {
		if len(sec.Data[k]) == 0 {
			t.Errorf("Secret lacks %q", k)
		}
	}
	if sec.Type != corev1.SecretTypeOpaque || sec.Labels["app.kubernetes.io/managed-by"] != "meshlet" {
		t.Errorf("Secret type %q labels %v", sec.Type, sec.Labels)
	}
	// A restarted replica: a new store over the same API server.
	again, created, err := mtls.LoadOrCreateCA(ctx, store(client), opts)
	if err != nil || created || !again.Root().Equal(first.Root()) {
		t.Fatalf("after a restart: created=%v err=%v same root=%v", created, err, err == nil && again.Root().Equal(first.Root()))
	}
	if err := store(client).Create(ctx, first.Material()); !errors.Is(err, mtls.ErrCAExists) {
		t.Fatalf("Create over an existing Secret: %v, want ErrCAExists", err)
	}
}

func TestSecretStoreReplicasRace(t *testing.T) {
	client := fake.NewClientset()
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
			ca, c, err := mtls.LoadOrCreateCA(context.Background(), store(client), opts)
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

func TestSecretStoreNeverRegenerates(t *testing.T) {
	client := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "meshlet-system", Name: "meshlet-ca"},
		Data:       map[string][]byte{"unrelated": []byte("x")},
	})
	_, _, err := mtls.LoadOrCreateCA(context.Background(), store(client), opts)
	if err == nil || !strings.Contains(err.Error(), "refusing to regenerate") || !strings.Contains(err.Error(), "meshlet-system/meshlet-ca") {
		t.Fatalf("err = %v", err)
	}
	sec, _ := client.CoreV1().Secrets("meshlet-system").Get(context.Background(), "meshlet-ca", metav1.GetOptions{})
	if len(sec.Data) != 1 {
		t.Fatalf("the Secret was modified: %v", sec.Data)
	}
}
