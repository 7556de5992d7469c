package sds

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// Caller is the identity an Authenticator vouches for: a Kubernetes service
// account.
type Caller struct {
	// Namespace and ServiceAccount name the service account.
	Namespace, ServiceAccount string
	// PodName is the pod the token is bound to, when the token says so
	// (for logs only).
	PodName string
}

// Authenticator checks a caller's bearer token and says who it belongs to.
// Package kubeauth implements it with a Kubernetes TokenReview.
type Authenticator interface {
	// Authenticate returns the token's identity, or an error saying why the
	// token is refused (never containing the token).
	Authenticate(ctx context.Context, token string) (Caller, error)
}

// TokenFile returns a token source reading path on every call, so a token
// the kubelet rotated in place is picked up (a projected token lives an hour
// by default).
func TokenFile(path string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("sds: read token: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("sds: token file %s is empty", path)
		}
		return tok, nil
	}
}
