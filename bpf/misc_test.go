package bpf

import (
	"net/netip"
	"strings"
	"testing"
)

// These need no kernel.

func TestCIDRKey(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		bits   uint32
		addr   string
	}{
		{"10.96.0.0/12", 108, "::ffff:10.96.0.0"},
		{"10.96.1.2/12", 108, "::ffff:10.96.0.0"}, // masked
		{"0.0.0.0/0", 96, "::ffff:0.0.0.0"},
		{"fd00:97::/32", 32, "fd00:97::"},
		{"::1/128", 128, "::1"},
	} {
		k := newCIDRKey(netip.MustParsePrefix(tc.prefix))
		if k.PrefixLen != tc.bits || netip.AddrFrom16(k.Addr) != netip.MustParseAddr(tc.addr) {
			t.Errorf("newCIDRKey(%s) = /%d %s, want /%d %s", tc.prefix, k.PrefixLen, netip.AddrFrom16(k.Addr), tc.bits, tc.addr)
		}
	}
}

func TestOrigDstAddrPort(t *testing.T) {
	v4 := origDst{Addr: netip.MustParseAddr("::ffff:10.96.0.10").As16(), Port: 80, Family: afInet}
	if got := v4.addrPort().String(); got != "10.96.0.10:80" {
		t.Errorf("IPv4 original destination = %s", got)
	}
	v6 := origDst{Addr: netip.MustParseAddr("fd00::1").As16(), Port: 443, Family: afInet6}
	if got := v6.addrPort().String(); got != "[fd00::1]:443" {
		t.Errorf("IPv6 original destination = %s", got)
	}
	if k := newAddrKey(netip.MustParseAddrPort("[::ffff:127.0.0.1]:5000")); k != newAddrKey(netip.MustParseAddrPort("127.0.0.1:5000")) {
		t.Error("a v4-mapped peer and its IPv4 form give different keys")
	}
}

func TestUnescapeMountPath(t *testing.T) {
	if got := unescapeMountPath(`/sys/fs/cgroup/with\040space`); got != "/sys/fs/cgroup/with space" {
		t.Errorf("unescape = %q", got)
	}
	if got := unescapeMountPath("/sys/fs/cgroup/unified"); got != "/sys/fs/cgroup/unified" {
		t.Errorf("unescape = %q", got)
	}
}

func TestLoadRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{OutboundIPv4: netip.MustParseAddrPort("[::1]:15001")}, "OutboundIPv4 [::1]:15001 is not an IPv4"},
		{Options{OutboundIPv6: netip.MustParseAddrPort("127.0.0.1:15001")}, "OutboundIPv6 127.0.0.1:15001 is not an IPv6"},
		{Options{OutboundIPv6: netip.MustParseAddrPort("[::ffff:127.0.0.1]:15001")}, "is not an IPv6"},
		{Options{ProxyCgroup: "/nonexistent/cgroup"}, `cgroup "/nonexistent/cgroup"`},
		{Options{ProxyCgroup: "/tmp"}, "not a cgroup v2 directory"},
	} {
		o, err := Load(tc.opts)
		if err == nil {
			o.Close()
			t.Errorf("Load(%+v) succeeded", tc.opts)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%+v) = %v, want %q", tc.opts, err, tc.want)
		}
	}
}
