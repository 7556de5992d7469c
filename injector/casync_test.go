package injector

import (
	"encoding/json"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The caBundle patch replaces only the caBundles that differ from the
// root, behind a test of the resourceVersion it was computed from; with
// every caBundle right there is no patch.
func TestCABundlePatch(t *testing.T) {
	root := []byte("-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----\n")
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "meshlet-injector", ResourceVersion: "42"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "a", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: root}},
			{Name: "b", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte("other")}},
		},
	}
	patch, err := caBundlePatch(mwc, root)
	if err != nil {
		t.Fatal(err)
	}
	var ops []struct {
		Op, Path string
		Value    any
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	if len(ops) != 2 || ops[0].Op != "test" || ops[0].Path != "/metadata/resourceVersion" || ops[0].Value != "42" ||
		ops[1].Path != "/webhooks/1/clientConfig/caBundle" {
		t.Fatalf("patch %s: want a resourceVersion test, then webhook 1's caBundle only", patch)
	}
	mwc.Webhooks[1].ClientConfig.CABundle = root
	if patch, err := caBundlePatch(mwc, root); err != nil || patch != nil {
		t.Fatalf("caBundles right: patch %s, %v; want none", patch, err)
	}
}
