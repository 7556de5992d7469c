package dataplane

import (
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/meshlet-dev/meshlet/authz"
	"github.com/meshlet-dev/meshlet/config"
)

// rbacDeniedBody is the body of Envoy's RBAC denial, which clients and
// runbooks recognise.
const rbacDeniedBody = "RBAC: access denied"

// authzCounters are meshlet_authz_decisions_total's counters, kept by the
// server across reloads so that a policy update does not reset them.
type authzCounters struct{ m sync.Map } // [3]string{action, policy, result} -> *atomic.Uint64

func (a *authzCounters) get(action, policy, result string) *atomic.Uint64 {
	k := [3]string{action, policy, result}
	if v, ok := a.m.Load(k); ok {
		return v.(*atomic.Uint64)
	}
	v, _ := a.m.LoadOrStore(k, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

func (a *authzCounters) each(f func(action, policy, result string, n uint64)) {
	a.m.Range(func(k, v any) bool {
		kk := k.([3]string)
		f(kk[0], kk[1], kk[2], v.(*atomic.Uint64).Load())
		return true
	})
}

// boundChain is a chain with its counters bound at reload time, so a
// decision counts without a map lookup or a label allocation.
type boundChain struct {
	chain authz.Chain
	// counts[i][j+1] counts filter i's decisions where policy j matched;
	// counts[i][0] those where none did (nil where nothing is counted).
	counts [][]*atomic.Uint64
	source bool // a policy reads the source address
}

// Observe implements authz.Observer.
func (b *boundChain) Observe(filter, policy int) {
	if c := b.counts[filter][policy+1]; c != nil {
		c.Add(1)
	}
}

func bindChain(ch authz.Chain, counters *authzCounters) *boundChain {
	if len(ch) == 0 {
		return nil
	}
	b := &boundChain{chain: ch, source: ch.Needs(), counts: make([][]*atomic.Uint64, len(ch))}
	for i, f := range ch {
		if !f.Enforcing {
			continue
		}
		action := f.Action.String()
		matched, unmatched := "allowed", "denied"
		switch f.Action {
		case authz.Deny:
			matched, unmatched = "denied", "allowed"
		case authz.Log:
			matched, unmatched = "logged", ""
		}
		b.counts[i] = make([]*atomic.Uint64, len(f.Policies)+1)
		if unmatched != "" {
			b.counts[i][0] = counters.get(action, authz.NoPolicy, unmatched)
		}
		for j, p := range f.Policies {
			b.counts[i][j+1] = counters.get(action, p.Name, matched)
		}
	}
	return b
}

// listenerAuthz is an inbound listener's bound RBAC chains.
type listenerAuthz struct {
	http, network *boundChain
}

func bindAuthz(a *config.Authz, counters *authzCounters) *listenerAuthz {
	if a == nil {
		return nil
	}
	la := &listenerAuthz{http: bindChain(a.HTTP, counters), network: bindChain(a.Network, counters)}
	if la.http == nil && la.network == nil {
		return nil
	}
	return la
}

// connInput fills what a decision reads of the connection.
func (b *boundChain) connInput(in *authz.Input, info connInfo) {
	in.Authenticated = info.mtls && info.peer != ""
	in.Principal = info.peer
	in.Destination = info.dst
	if b.source {
		if ap, err := netip.ParseAddrPort(info.src); err == nil {
			in.Source = ap.Addr().Unmap()
		}
	}
}

// rbacDetails is Envoy's response details of an RBAC denial, whitespace
// in the policy name replaced as Envoy replaces it.
func rbacDetails(policy string) string {
	return "rbac_access_denied_matched_policy[" + strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\n', '\r', '\f', '\v':
			return '_'
		}
		return r
	}, policy) + "]"
}

// authorizeRequest runs the listener's HTTP RBAC filters on an inbound
// request, after normalizing its path (what the filters match is what
// the app gets, so "/public/../admin" cannot pass as "/public/"). A
// denied request is answered 403 "RBAC: access denied", as Envoy's RBAC
// filter answers, and false is returned.
func (w *worker) authorizeRequest(rw http.ResponseWriter, req *http.Request, ex *activeStream, b *boundChain, info connInfo) bool {
	if p := req.URL.EscapedPath(); needsNormalizing(p) {
		setEscapedPath(req.URL, normalizePath(p))
	}
	in := authz.Input{HTTP: true, Method: req.Method, Authority: req.Host, Scheme: "http", Header: req.Header,
		Path: req.URL.EscapedPath(), Query: req.URL.RawQuery}
	if info.mtls {
		in.Scheme = "https"
	}
	b.connInput(&in, info)
	d := b.chain.Decide(&in, b)
	if d.Allowed {
		return true
	}
	ex.details = rbacDetails(d.Policy)
	w.localReply(rw, ex, http.StatusForbidden, rbacDeniedBody)
	return false
}

// authorizeConn runs the listener's network RBAC filters on an inbound
// connection about to be proxied as opaque TCP; a denied one is closed
// by the caller with the returned details.
func authorizeConn(b *boundChain, info connInfo) (details string, ok bool) {
	var in authz.Input
	b.connInput(&in, info)
	d := b.chain.Decide(&in, b)
	if d.Allowed {
		return "", true
	}
	return rbacDetails(d.Policy), false
}
