package xds

import "context"

// Authenticator identifies the workload behind an xDS stream from the
// stream's context (its peer and gRPC metadata, where the sidecar sends
// its projected ServiceAccount token). An error rejects the stream as
// Unauthenticated. The sds package's TokenReview authenticator is meant to
// satisfy it; a nil Authenticator accepts every stream (tests, or a
// listener that authenticates by other means).
type Authenticator interface {
	Authenticate(ctx context.Context) (namespace, serviceAccount string, err error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(ctx context.Context) (namespace, serviceAccount string, err error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(ctx context.Context) (string, string, error) { return f(ctx) }
