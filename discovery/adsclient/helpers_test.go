package adsclient

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// fromYAML decodes a YAML snippet of an Envoy resource into m.
func fromYAML(t *testing.T, y string, m proto.Message) {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatalf("yaml: %v\n%s", err, y)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		t.Fatalf("protojson: %v\n%s", err, y)
	}
}

// wantErr fails unless err is non-nil and contains every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}

func eq[T any](t *testing.T, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}
