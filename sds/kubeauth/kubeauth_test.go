package kubeauth

import (
	"context"
	"strings"
	"testing"

	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshlet-dev/meshlet/sds"
	"github.com/meshlet-dev/meshlet/sds/internal/fakekube"
)

// These tests run against client-go's fake clientset (package fakekube), a
// stand-in for a real kube-apiserver, which this session does not have. The
// real TokenReview test (wrong audience, expired token, another service
// account) comes with the injector issue.

func tokens() map[string]fakekube.Token {
	return map[string]fakekube.Token{
		"web-token":  {User: fakekube.ServiceAccount("default", "web"), Audiences: []string{sds.TokenAudience}},
		"api-token":  {User: fakekube.ServiceAccount("default", "web"), Audiences: []string{"https://kubernetes.default.svc"}},
		"old-token":  {User: fakekube.ServiceAccount("default", "web"), Audiences: []string{sds.TokenAudience}, Expired: true},
		"user-token": {User: authv1.UserInfo{Username: "alice"}, Audiences: []string{sds.TokenAudience}},
		"node-token": {User: authv1.UserInfo{Username: "system:serviceaccount:kube-system"}, Audiences: []string{sds.TokenAudience}},
	}
}

func TestTokenReviewAuthenticator(t *testing.T) {
	cs := fakekube.APIServer(tokens())
	a := &TokenReviewAuthenticator{Client: cs}
	ctx := context.Background()

	c, err := a.Authenticate(ctx, "web-token")
	if err != nil {
		t.Fatal(err)
	}
	if c != (sds.Caller{Namespace: "default", ServiceAccount: "web", PodName: "web-pod"}) {
		t.Errorf("caller %+v", c)
	}
	var sent *authv1.TokenReview
	for _, act := range cs.Actions() {
		if cr, ok := act.(k8stesting.CreateAction); ok && act.GetResource().Resource == "tokenreviews" {
			sent = cr.GetObject().(*authv1.TokenReview)
		}
	}
	if sent == nil || strings.Join(sent.Spec.Audiences, ",") != sds.TokenAudience || sent.Spec.Token != "web-token" {
		t.Fatalf("TokenReview sent: %+v", sent)
	}

	for tok, want := range map[string]string{
		"":                 "empty token",
		"nope":             "invalid bearer token",
		"api-token":        "invalid for the target audiences",
		"old-token":        "has expired",
		"user-token":       `token user "alice" is not a service account`,
		"node-token":       `"system:serviceaccount:kube-system" is not a service account`,
		fakekube.DownToken: "TokenReview: connection refused",
	} {
		_, err := a.Authenticate(ctx, tok)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("token %q: err = %v, want %q", tok, err, want)
		}
		if err != nil && tok != "" && tok != fakekube.DownToken && strings.Contains(err.Error(), tok) {
			t.Errorf("error leaks the token: %v", err)
		}
	}
}

// An API server that is not audience-aware authenticates the token but
// echoes no audience; such an answer must not be trusted.
func TestTokenReviewWithoutAudienceRefused(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		tr := action.(k8stesting.CreateAction).GetObject().(*authv1.TokenReview).DeepCopy()
		tr.Status = authv1.TokenReviewStatus{Authenticated: true, User: fakekube.ServiceAccount("default", "web")}
		return true, tr, nil
	})
	_, err := (&TokenReviewAuthenticator{Client: cs}).Authenticate(context.Background(), "t")
	if err == nil || !strings.Contains(err.Error(), `not bound to audience "meshlet"`) {
		t.Fatalf("err = %v", err)
	}
}
