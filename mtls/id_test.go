package mtls

import (
	"strings"
	"testing"
)

func TestWorkloadID(t *testing.T) {
	tests := []struct {
		td, ns, sa string
		want       string // "" means an error that names the bad input
		bad        string
	}{
		{td: "cluster.local", ns: "default", sa: "web", want: "spiffe://cluster.local/ns/default/sa/web"},
		{td: "spiffe://example.org", ns: "prod-eu", sa: "api.v2", want: "spiffe://example.org/ns/prod-eu/sa/api.v2"},
		{td: "Cluster.Local", ns: "default", sa: "web", bad: "Cluster.Local"},
		{td: "", ns: "default", sa: "web", bad: `trust domain ""`},
		{td: "cluster.local", ns: "", sa: "web", bad: `namespace ""`},
		{td: "cluster.local", ns: "a/b", sa: "web", bad: `"a/b"`},
		{td: "cluster.local", ns: "default", sa: "..", bad: `".."`},
		{td: "cluster.local", ns: "default", sa: "we b", bad: `"we b"`},
	}
	for _, tc := range tests {
		id, err := WorkloadID(tc.td, tc.ns, tc.sa)
		if tc.want != "" {
			if err != nil || id.String() != tc.want {
				t.Errorf("WorkloadID(%q, %q, %q) = %v, %v; want %s", tc.td, tc.ns, tc.sa, id, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("WorkloadID(%q, %q, %q) error = %v; want one naming %s", tc.td, tc.ns, tc.sa, err, tc.bad)
		}
	}
}

func TestParseWorkloadID(t *testing.T) {
	tests := []struct {
		in      string
		td      string
		ns, sa  string
		wantErr string
	}{
		{in: "spiffe://cluster.local/ns/default/sa/web", td: "cluster.local", ns: "default", sa: "web"},
		{in: "spiffe://example.org/ns/kube-system/sa/coredns", td: "example.org", ns: "kube-system", sa: "coredns"},
		{in: "spiffe://cluster.local/ns/default", wantErr: "is not /ns/<namespace>/sa/<service-account>"},
		{in: "spiffe://cluster.local/ns/default/sa/web/extra", wantErr: "is not /ns/<namespace>/sa/<service-account>"},
		{in: "spiffe://cluster.local/namespace/default/sa/web", wantErr: "is not /ns/<namespace>/sa/<service-account>"},
		{in: "spiffe://cluster.local", wantErr: "is not /ns/"},
		{in: "https://cluster.local/ns/default/sa/web", wantErr: "scheme"},
		{in: "spiffe://cluster.local/ns//sa/web", wantErr: "empty segments"},
		{in: "spiffe://cluster.local/ns/default/sa/web?x=1", wantErr: "path segment characters"},
		{in: "", wantErr: "cannot be empty"},
	}
	for _, tc := range tests {
		w, err := ParseWorkloadID(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `"`+tc.in+`"`) {
				t.Errorf("ParseWorkloadID(%q) error = %v; want one with %q naming the input", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseWorkloadID(%q): %v", tc.in, err)
			continue
		}
		if w.TrustDomain.Name() != tc.td || w.Namespace != tc.ns || w.ServiceAccount != tc.sa {
			t.Errorf("ParseWorkloadID(%q) = %+v", tc.in, w)
		}
		if w.String() != tc.in {
			t.Errorf("round trip of %q gave %q", tc.in, w.String())
		}
	}
}
