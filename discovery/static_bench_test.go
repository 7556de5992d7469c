package discovery

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParseStaticClusters measures what a static file costs to load
// per cluster (YAML to JSON, protojson into Envoy's Cluster, translation,
// validation), at the sizes bench/RESULTS.md reports: one op is one whole
// file of n clusters with two endpoints each.
func BenchmarkParseStaticClusters(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		data := staticClusters(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				cfg, err := ParseStatic(data)
				if err != nil {
					b.Fatal(err)
				}
				if len(cfg.Clusters) != n {
					b.Fatalf("%d clusters, want %d", len(cfg.Clusters), n)
				}
			}
		})
	}
}

// staticClusters is a static file of n clusters of two endpoints each.
func staticClusters(n int) []byte {
	var sb strings.Builder
	sb.WriteString("clusters:\n")
	for i := range n {
		fmt.Fprintf(&sb, `  - name: svc-%d
    connect_timeout: 1s
    load_assignment:
      endpoints:
        - locality: {region: r1, zone: a}
          lb_endpoints:
            - endpoint: {address: {socket_address: {address: 10.%d.%d.1, port_value: 8080}}}
            - endpoint: {address: {socket_address: {address: 10.%d.%d.2, port_value: 8080}}}
`, i, i/256%256, i%256, i/256%256, i%256)
	}
	return []byte(sb.String())
}
