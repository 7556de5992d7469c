package mtls

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

func TestDetectTLS(t *testing.T) {
	// The first bytes of a real ClientHello from crypto/tls.
	client, server := net.Pipe()
	go tls.Client(client, &tls.Config{InsecureSkipVerify: true}).Handshake()
	hello := make([]byte, 5)
	if _, err := server.Read(hello); err != nil {
		t.Fatal(err)
	}
	client.Close()
	server.Close()

	tests := []struct {
		name  string
		first []byte
		want  bool
	}{
		{"crypto/tls ClientHello", hello, true},
		{"TLS 1.0 record header", []byte{0x16, 0x03, 0x01}, true},
		{"HTTP/1.1", []byte("GET / HTTP/1.1\r\n"), false},
		{"HTTP/2 preface", []byte("PRI * HTTP/2.0\r\n"), false},
		{"TLS alert record", []byte{0x15, 0x03, 0x03}, false},
		{"SSLv2-looking", []byte{0x16, 0x02}, false},
		{"one byte", []byte{0x16}, false},
		{"nothing", nil, false},
	}
	for _, tc := range tests {
		if got := DetectTLS(tc.first); got != tc.want {
			t.Errorf("%s: DetectTLS(% x) = %v, want %v", tc.name, tc.first, got, tc.want)
		}
	}
}

func TestPolicyAllow(t *testing.T) {
	web := spiffeid.RequireFromString("spiffe://cluster.local/ns/prod/sa/web")
	db := spiffeid.RequireFromString("spiffe://cluster.local/ns/prod/sa/db")
	dev := spiffeid.RequireFromString("spiffe://cluster.local/ns/dev/sa/web")
	partner := spiffeid.RequireFromString("spiffe://partner.example/ns/prod/sa/web")
	odd := spiffeid.RequireFromString("spiffe://cluster.local/prod/web") // not the mesh scheme
	tests := []struct {
		name   string
		policy Policy
		allow  []spiffeid.ID
		deny   []spiffeid.ID
	}{
		{"empty allows every verified peer", Policy{}, []spiffeid.ID{web, dev, partner, odd}, nil},
		{"ids", Policy{IDs: []spiffeid.ID{web}}, []spiffeid.ID{web}, []spiffeid.ID{db, dev, partner}},
		{"namespaces", Policy{Namespaces: []string{"prod"}}, []spiffeid.ID{web, db, partner}, []spiffeid.ID{dev, odd}},
		{"trust domains", Policy{TrustDomains: []spiffeid.TrustDomain{partner.TrustDomain()}}, []spiffeid.ID{partner}, []spiffeid.ID{web, dev}},
		{"any entry matches", Policy{IDs: []spiffeid.ID{dev}, TrustDomains: []spiffeid.TrustDomain{partner.TrustDomain()}}, []spiffeid.ID{dev, partner}, []spiffeid.ID{web}},
	}
	for _, tc := range tests {
		for _, id := range tc.allow {
			if err := tc.policy.Allow(id); err != nil {
				t.Errorf("%s: %s refused: %v", tc.name, id, err)
			}
		}
		for _, id := range tc.deny {
			err := tc.policy.Allow(id)
			if err == nil || !strings.Contains(err.Error(), id.String()) {
				t.Errorf("%s: %s: err = %v, want a refusal naming it", tc.name, id, err)
			}
		}
	}
	pp := PortPolicies{Default: Policy{Mode: Permissive}, Ports: map[int]Policy{8080: {IDs: []spiffeid.ID{web}}}}
	if err := pp.Authorize(8080, db); err == nil || !strings.Contains(err.Error(), "port 8080") {
		t.Errorf("port policy: %v", err)
	}
	if err := pp.Authorize(9090, db); err != nil {
		t.Errorf("default policy: %v", err)
	}
	if p := pp.For(8080); p.AdmitPlaintext() == nil {
		t.Error("STRICT port 8080 admits plaintext")
	}
	if p := pp.For(9090); p.AdmitPlaintext() != nil {
		t.Error("PERMISSIVE default refuses plaintext")
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"STRICT": Strict, "permissive": Permissive, " Strict ": Strict} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseMode("DISABLE"); err == nil || !strings.Contains(err.Error(), `"DISABLE"`) {
		t.Errorf("ParseMode(DISABLE): %v", err)
	}
}
