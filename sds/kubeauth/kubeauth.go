// Package kubeauth authenticates SDS callers by their projected
// ServiceAccount token with the Kubernetes TokenReview API. It is separate
// from sds so that the sidecar, which uses the sds client but never talks to
// the Kubernetes API, does not link client-go.
package kubeauth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet-dev/meshlet/sds"
)

// TokenReviewAuthenticator is an sds.Authenticator. The API server checks
// the token's signature, expiry and audience, and that the pod it is bound to
// still exists; the caller's identity is the service account it names.
type TokenReviewAuthenticator struct {
	// Client talks to the API server; it needs create on tokenreviews
	// (ClusterRole system:auth-delegator grants it).
	Client kubernetes.Interface
	// Audiences the token must be bound to; default [sds.TokenAudience].
	Audiences []string
}

var _ sds.Authenticator = (*TokenReviewAuthenticator)(nil)

const serviceAccountPrefix = "system:serviceaccount:"

// podNameKey is the user extra a pod-bound token carries.
const podNameKey = "authentication.kubernetes.io/pod-name"

// Authenticate implements sds.Authenticator. Errors say why the token was
// refused and never contain the token.
func (a *TokenReviewAuthenticator) Authenticate(ctx context.Context, token string) (sds.Caller, error) {
	if token == "" {
		return sds.Caller{}, errors.New("kubeauth: empty token")
	}
	auds := a.Audiences
	if len(auds) == 0 {
		auds = []string{sds.TokenAudience}
	}
	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx, &authv1.TokenReview{
		Spec: authv1.TokenReviewSpec{Token: token, Audiences: auds},
	}, metav1.CreateOptions{})
	if err != nil {
		return sds.Caller{}, fmt.Errorf("kubeauth: TokenReview: %w", err)
	}
	st := tr.Status
	if st.Error != "" {
		return sds.Caller{}, fmt.Errorf("kubeauth: token refused by TokenReview: %s", st.Error)
	}
	if !st.Authenticated {
		return sds.Caller{}, errors.New("kubeauth: token refused by TokenReview: not authenticated")
	}
	// An audience-aware API server echoes the audiences the token is bound
	// to; one that ignores audiences echoes none and must not be trusted.
	if !slices.ContainsFunc(st.Audiences, func(s string) bool { return slices.Contains(auds, s) }) {
		return sds.Caller{}, fmt.Errorf("kubeauth: token of %q is not bound to audience %q (TokenReview audiences %q)", st.User.Username, strings.Join(auds, ","), st.Audiences)
	}
	rest, isSA := strings.CutPrefix(st.User.Username, serviceAccountPrefix)
	ns, sa, ok := strings.Cut(rest, ":")
	if !isSA || !ok || ns == "" || sa == "" || strings.Contains(sa, ":") {
		return sds.Caller{}, fmt.Errorf("kubeauth: token user %q is not a service account", st.User.Username)
	}
	c := sds.Caller{Namespace: ns, ServiceAccount: sa}
	if pods := st.User.Extra[podNameKey]; len(pods) == 1 {
		c.PodName = pods[0]
	}
	return c, nil
}
