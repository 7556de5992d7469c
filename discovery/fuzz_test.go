package discovery

import (
	"testing"

	sidecarexample "github.com/meshlet-dev/meshlet/examples/sidecar"
)

// FuzzParseStatic checks that ParseStatic never panics and returns either an
// error or a config that passes Validate, never both or neither. Plain
// `go test` runs the seeds only; `go test -fuzz FuzzParseStatic
// ./discovery/` explores further.
func FuzzParseStatic(f *testing.F) {
	f.Add(sidecarexample.Config)
	f.Add([]byte(staticCluster))
	f.Add([]byte(""))
	f.Add([]byte("listeners: [\n"))
	f.Add([]byte("clusters: [{name: a, load_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 99999}}}}]}]}}]\n"))
	f.Add([]byte("clusters: [{name: a, typed_extension_protocol_options: {x: {\"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions, explicit_http_config: {}}}}]\n"))
	f.Add([]byte("listeners: [{address: 127.0.0.1:1, routes: [{cluster: a, retry_policy: {retry_on: 5xx, retry_back_off: {}}}]}]\nclusters: [{name: a}]\n"))
	f.Add([]byte("admin: off\naccess_log: {path: off}\nnode: {locality: {zone: [a]}}\n"))
	f.Add([]byte(`{"clusters": [{"name": "a", "lbPolicy": "MAGLEV", "maglevLbConfig": {"tableSize": "7"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseStatic(data)
		switch {
		case err != nil && cfg != nil:
			t.Fatalf("both a config and an error: %v", err)
		case err == nil && cfg == nil:
			t.Fatal("neither a config nor an error")
		case err == nil:
			if verr := cfg.Validate(); verr != nil {
				t.Fatalf("accepted config fails Validate: %v", verr)
			}
		}
	})
}
