//go:build !meshlet_keylog

package mtls

import (
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// TestNoKeyLogByDefault: only a build with -tags meshlet_keylog logs TLS
// secrets, and then only where MESHLET_TLS_KEYLOG says; this build must
// not, whatever the environment.
func TestNoKeyLogByDefault(t *testing.T) {
	t.Setenv("MESHLET_TLS_KEYLOG", t.TempDir()+"/keys.log")
	cfg, err := ClientConfig(NewStore(), ClientOptions{ServerTrustDomain: spiffeid.RequireTrustDomainFromString("example.org")})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KeyLogWriter != nil {
		t.Fatal("a default build's client TLS config logs TLS secrets")
	}
}
