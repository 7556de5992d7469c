package authz

import (
	"testing"

	"github.com/meshlet-dev/meshlet/internal/puritytest"
)

// TestPackageIsPure keeps authz free of I/O, goroutines and wall clocks:
// it reads Envoy's types and what the caller puts in an Input.
func TestPackageIsPure(t *testing.T) {
	puritytest.Check(t, 3, "fmt", "net/http", "net/netip", "net/textproto", "regexp", "slices", "strings",
		"github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3",
		"github.com/envoyproxy/go-control-plane/envoy/config/route/v3",
		"github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3",
		"github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3",
		"github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3",
		"google.golang.org/protobuf/proto", "google.golang.org/protobuf/reflect/protoreflect",
		"github.com/meshlet-dev/meshlet/internal/re2")
}
