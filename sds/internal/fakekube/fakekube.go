// Package fakekube is the TokenReview stand-in of the sds tests: client-go's
// fake clientset with a reactor that answers TokenReviews the way the
// kube-apiserver documents. It stands in for a real API server, which these
// tests do not have; the real-API-server test comes with the injector issue.
package fakekube

import (
	"errors"
	"slices"

	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Token is a token the stand-in API server knows.
type Token struct {
	User      authv1.UserInfo // whom the token authenticates
	Audiences []string        // audiences the token is bound to
	Expired   bool            // the token has expired
}

// DownToken makes the TokenReview call itself fail.
const DownToken = "apiserver-down"

// ServiceAccount is the user of a pod-bound ServiceAccount token.
func ServiceAccount(ns, sa string) authv1.UserInfo {
	return authv1.UserInfo{
		Username: "system:serviceaccount:" + ns + ":" + sa,
		Extra:    map[string]authv1.ExtraValue{"authentication.kubernetes.io/pod-name": {sa + "-pod"}},
	}
}

// APIServer returns a fake clientset whose TokenReviews know tokens: unknown
// or expired tokens are not authenticated, a token whose audiences miss the
// requested ones is refused, and status.audiences is the intersection of the
// requested audiences and the token's.
func APIServer(tokens map[string]Token) *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		tr := action.(k8stesting.CreateAction).GetObject().(*authv1.TokenReview).DeepCopy()
		tok, ok := tokens[tr.Spec.Token]
		switch {
		case tr.Spec.Token == DownToken:
			return true, nil, errors.New("connection refused")
		case !ok:
			tr.Status = authv1.TokenReviewStatus{Error: "invalid bearer token"}
		case tok.Expired:
			tr.Status = authv1.TokenReviewStatus{Error: "invalid bearer token, service account token has expired"}
		default:
			var common []string
			for _, a := range tr.Spec.Audiences {
				if slices.Contains(tok.Audiences, a) {
					common = append(common, a)
				}
			}
			if len(tr.Spec.Audiences) > 0 && len(common) == 0 {
				tr.Status = authv1.TokenReviewStatus{Error: "invalid bearer token, token audiences are invalid for the target audiences"}
				break
			}
			tr.Status = authv1.TokenReviewStatus{Authenticated: true, User: tok.User, Audiences: common}
		}
		return true, tr, nil
	})
	return cs
}
