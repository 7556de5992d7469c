package dataplane

import (
	"net"
	"net/netip"
	"strings"
)

// matchRoute finds the route for a destination and (for HTTP) host.
// The host is normalised (port dropped, lower case) only for a route that
// matches on hosts.
func (ls *listenerState) matchRoute(dst netip.AddrPort, host string, http bool) *routeState {
	normalised := false
	for _, r := range ls.routes {
		if r.hasDst && (r.dst.Port() != dst.Port() || (!r.anyIP && r.dst.Addr() != dst.Addr())) {
			continue
		}
		if len(r.cfg.Hosts) > 0 {
			if !http {
				continue
			}
			if !normalised {
				host, normalised = strings.ToLower(hostOnly(host)), true
			}
			if !hostMatches(r.cfg.Hosts, host) {
				continue
			}
		}
		return r
	}
	return nil
}

// hostOnly is an authority without its port: net.SplitHostPort's host
// where it splits, else the authority as it is. The common forms (a name
// or IPv4 address, with or without a numeric port) are split here.
func hostOnly(authority string) string {
	i := strings.LastIndexByte(authority, ':')
	if i < 0 {
		return authority
	}
	// (IndexByte, whose code every request runs already, not IndexAny.)
	if h := authority[:i]; strings.IndexByte(h, ':') < 0 && strings.IndexByte(h, '[') < 0 && strings.IndexByte(h, ']') < 0 &&
		i+1 < len(authority) && allDigits(authority[i+1:]) {
		return authority[:i]
	}
	if h, _, err := net.SplitHostPort(authority); err == nil {
		return h
	}
	return authority
}

// allDigits reports whether s holds only ASCII digits.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func hostMatches(patterns []string, host string) bool {
	for _, p := range patterns {
		p = strings.ToLower(p)
		if p == host || p == "*" || (strings.HasPrefix(p, "*.") && strings.HasSuffix(host, p[1:])) {
			return true
		}
	}
	return false
}
