package lb

import (
	"testing"

	"github.com/meshlet-dev/meshlet/lb/internal/vectortest"
)

// vector is one conformance vector of envoy-lb-vectors.json (schema
// "envoy-lb-vectors/1", described at the top of envoy-lb-spec.md).
type vector = vectortest.Vector

// vectorRunners maps a vector category to the function that checks it. Each
// area registers its runners from an init function in its own _test file.
// The retry, circuit-breaker and access-log categories are run by the tests
// of lb/retry, lb/circuitbreaker and lb/accesslog.
var vectorRunners = vectortest.Runners{}

// decodeVector unmarshals the input and expected parts of v strictly (see
// vectortest.Decode).
func decodeVector(t *testing.T, v vector, in, exp any) {
	t.Helper()
	vectortest.Decode(t, v, in, exp)
}

// TestEnvoyVectors runs every lb conformance vector of lb/testdata (or of
// the file named by MESHLET_LB_VECTORS), one subtest per vector.
func TestEnvoyVectors(t *testing.T) {
	vectortest.RunFile(t, vectortest.EnvoyFile("testdata"), "lb", vectorRunners)
}

// TestMeshletVectors runs meshlet's own vectors, in the same schema, for
// cases the public file does not cover: buckets with no healthy host, and
// every schema field the public vectors leave unused.
func TestMeshletVectors(t *testing.T) {
	vectortest.RunMeshletFiles(t, "testdata", "lb", vectorRunners)
}
