package adsclient

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshlet-dev/meshlet/internal/testtool"
)

// fromYAML decodes a YAML snippet of an Envoy resource into m.
func fromYAML(t *testing.T, y string, m proto.Message) { t.Helper(); testtool.FromYAML(t, y, m) }

// wantErr fails unless err is non-nil and contains every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	testtool.WantErr(t, err, parts...)
}

func eq[T any](t *testing.T, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}
