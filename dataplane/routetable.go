package dataplane

import (
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// A route table is a destination's list of rules (RDS, from Gateway API
// routes): the first rule whose match holds decides what the request
// gets, as Envoy walks a virtual host's routes.

// ruleState is a rule at run time, its expressions compiled.
type ruleState struct {
	cfg      *config.RouteRule
	pathRe   *regexp.Regexp // PathRegex, anchored
	headers  []valueMatch
	query    []valueMatch
	backends []backendState
	total    uint64 // sum of the backends' weights
	// rewriteRe and rewriteSub are the regex rewrite, its substitution in
	// Go's syntax.
	rewriteRe  *regexp.Regexp
	rewriteSub string
}

// valueMatch is a compiled StringMatch.
type valueMatch struct {
	name  string // canonical header name, ":method", ":authority", or a query parameter
	exact string
	re    *regexp.Regexp // anchored; nil: exact
}

// backendState is a backend of a rule: the route the router runs for it
// (its cluster, the rule's timeout and retry policy).
type backendState struct {
	cfg   *config.WeightedBackend
	route *routeState
}

// compileRules builds the run-time rules of a route; config.Validate has
// checked every expression.
func compileRules(rc *config.Route, clusters map[string]*cluster) []*ruleState {
	out := make([]*ruleState, 0, len(rc.Rules))
	for i := range rc.Rules {
		r := &rc.Rules[i]
		rs := &ruleState{cfg: r}
		if r.Match.PathKind == config.PathRegex {
			rs.pathRe = anchored(r.Match.Path)
		}
		rs.headers = compileMatches(r.Match.Headers, true)
		rs.query = compileMatches(r.Match.Query, false)
		for j := range r.Backends {
			b := &r.Backends[j]
			name := r.Name
			if name == "" {
				name = rc.Name
			}
			rt := &routeState{cfg: &config.Route{Name: name, Cluster: b.Cluster, Timeout: r.Timeout, Retry: r.Retry}, cluster: clusters[b.Cluster]}
			rs.backends = append(rs.backends, backendState{cfg: b, route: rt})
			rs.total += uint64(b.Weight)
		}
		if rr := r.RegexRewrite; rr != nil {
			rs.rewriteRe = regexp.MustCompile(rr.Pattern)
			rs.rewriteSub = goSubstitution(rr.Substitution)
		}
		out = append(out, rs)
	}
	return out
}

func compileMatches(ms []config.StringMatch, header bool) []valueMatch {
	out := make([]valueMatch, 0, len(ms))
	for _, m := range ms {
		vm := valueMatch{name: m.Name, exact: m.Exact}
		if header && !strings.HasPrefix(m.Name, ":") {
			vm.name = http.CanonicalHeaderKey(m.Name)
		}
		if header && strings.HasPrefix(m.Name, ":") {
			vm.name = strings.ToLower(m.Name)
		}
		if m.Regex != "" {
			vm.re = anchored(m.Regex)
		}
		out = append(out, vm)
	}
	return out
}

// anchored compiles a regular expression that must match a whole value,
// as Envoy's safe_regex does.
func anchored(expr string) *regexp.Regexp {
	return regexp.MustCompile("^(?:" + expr + ")$")
}

// goSubstitution turns Envoy's \1 group references into Go's ${1}, and
// escapes the dollars Go would read as references.
func goSubstitution(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			b.WriteString("${")
			b.WriteByte(s[i+1])
			b.WriteByte('}')
			i++
		case c == '$':
			b.WriteString("$$")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// matchRule returns the first rule the request matches, or nil.
func (r *routeState) matchRule(req *http.Request) *ruleState {
	path := req.URL.EscapedPath()
	var query url.Values
	for _, rs := range r.rules {
		if !rs.pathMatches(path) || !headersMatch(rs.headers, req) {
			continue
		}
		if len(rs.query) > 0 {
			if query == nil {
				query = req.URL.Query()
			}
			if !queryMatches(rs.query, query) {
				continue
			}
		}
		return rs
	}
	return nil
}

func (rs *ruleState) pathMatches(path string) bool {
	p := rs.cfg.Match.Path
	switch rs.cfg.Match.PathKind {
	case config.PathExact:
		return path == p
	case config.PathSeparatedPrefix:
		return path == p || len(path) > len(p) && path[len(p)] == '/' && strings.HasPrefix(path, p)
	case config.PathRegex:
		return rs.pathRe.MatchString(path)
	default:
		return strings.HasPrefix(path, p)
	}
}

// headersMatch checks header matchers: a header with several values
// matches as its values joined by ",", as Envoy matches them; an absent
// header matches nothing.
func headersMatch(ms []valueMatch, req *http.Request) bool {
	for i := range ms {
		m := &ms[i]
		var v string
		switch m.name {
		case ":method":
			v = req.Method
		case ":authority":
			v = req.Host
		default:
			vv := req.Header[m.name]
			if len(vv) == 0 {
				return false
			}
			v = vv[0]
			if len(vv) > 1 {
				v = strings.Join(vv, ",")
			}
		}
		if !m.matches(v) {
			return false
		}
	}
	return true
}

// queryMatches checks query parameter matchers against the first value
// of each parameter (Envoy's choice).
func queryMatches(ms []valueMatch, q url.Values) bool {
	for i := range ms {
		vv, ok := q[ms[i].name]
		if !ok || !ms[i].matches(vv[0]) {
			return false
		}
	}
	return true
}

func (m *valueMatch) matches(v string) bool {
	if m.re != nil {
		return m.re.MatchString(v)
	}
	return v == m.exact
}

// pick draws a backend by weight; nil when every weight is 0.
func (rs *ruleState) pick(w *worker) *backendState {
	if len(rs.backends) == 1 {
		return &rs.backends[0]
	}
	if rs.total == 0 {
		return nil
	}
	n := lockedRandom{w}.Uint64() % rs.total
	for i := range rs.backends {
		b := &rs.backends[i]
		if n < uint64(b.cfg.Weight) {
			return b
		}
		n -= uint64(b.cfg.Weight)
	}
	return nil
}

// rewrite applies the rule's path and host rewrites to the request.
func (rs *ruleState) rewrite(req *http.Request) {
	r := rs.cfg
	if r.HostRewrite != "" {
		req.Host = r.HostRewrite
	}
	if r.PrefixRewrite == "" && rs.rewriteRe == nil {
		return
	}
	path := req.URL.EscapedPath()
	var next string
	if rs.rewriteRe != nil {
		next = rs.rewriteRe.ReplaceAllString(path, rs.rewriteSub)
	} else {
		next = r.PrefixRewrite + path[len(r.Match.Path):]
	}
	if next == "" {
		next = "/"
	}
	setEscapedPath(req.URL, next)
}

// setEscapedPath sets u's path from its escaped form.
func setEscapedPath(u *url.URL, escaped string) {
	p, err := url.PathUnescape(escaped)
	if err != nil {
		u.Path, u.RawPath = escaped, ""
		return
	}
	u.Path, u.RawPath = p, ""
	if u.EscapedPath() != escaped {
		u.RawPath = escaped
	}
}

// applyHeaders applies a mutation to h: remove, then set, then add.
func applyHeaders(h http.Header, m *config.HeaderMutation) {
	for _, name := range m.Remove {
		delete(h, http.CanonicalHeaderKey(name))
	}
	for _, hd := range m.Set {
		h[http.CanonicalHeaderKey(hd.Name)] = []string{hd.Value}
	}
	for _, hd := range m.Add {
		k := http.CanonicalHeaderKey(hd.Name)
		h[k] = append(h[k], hd.Value)
	}
}

// redirectLocation builds a redirect's Location from the request, as
// Envoy's RedirectAction does: each part the redirect sets replaces the
// request's; the request's port stays unless a scheme change makes it
// the old scheme's default; a port that is the scheme's default is left
// out.
func redirectLocation(rd *config.Redirect, req *http.Request, rs *ruleState) string {
	scheme := "http"
	if req.TLS != nil {
		scheme = "https"
	}
	host, port := splitAuthority(req.Host)
	if rd.Scheme != "" && rd.Scheme != scheme {
		if port == defaultPort(scheme) {
			port = ""
		}
		scheme = rd.Scheme
	}
	if rd.Host != "" {
		host = rd.Host
	}
	if rd.Port != 0 {
		port = strconv.Itoa(int(rd.Port))
	}
	if port == defaultPort(scheme) {
		port = ""
	}
	path := req.URL.EscapedPath()
	switch {
	case rd.Path != "":
		path = rd.Path
	case rd.PrefixRewrite != "" && rs.cfg.Match.PathKind != config.PathRegex:
		path = rd.PrefixRewrite + path[min(len(rs.cfg.Match.Path), len(path)):]
	}
	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString("://")
	if strings.IndexByte(host, ':') >= 0 {
		b.WriteString("[" + host + "]")
	} else {
		b.WriteString(host)
	}
	if port != "" {
		b.WriteString(":" + port)
	}
	if path == "" {
		path = "/"
	}
	b.WriteString(path)
	if q := req.URL.RawQuery; q != "" && !strings.Contains(rd.Path, "?") {
		b.WriteString("?" + q)
	}
	return b.String()
}

// splitAuthority splits host[:port] (an IPv6 literal in brackets).
func splitAuthority(a string) (host, port string) {
	if h, p, err := net.SplitHostPort(a); err == nil {
		return h, p
	}
	return strings.Trim(a, "[]"), ""
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// routeByTable runs a route table for a request: it answers the request
// itself (no rule matched: 404 NR; a redirect; a direct response; a
// backend naming no cluster: NC) and returns nil, or changes the request
// as the rule says and returns the route of the backend it drew.
func (w *worker) routeByTable(rw http.ResponseWriter, req *http.Request, ex *activeStream, table *routeState) *routeState {
	rs := table.matchRule(req)
	if rs == nil {
		ex.flags |= respflag.NR
		ex.details = "route_not_found"
		w.localReply(rw, ex, http.StatusNotFound, "")
		return nil
	}
	r := rs.cfg
	switch {
	case r.Redirect != nil:
		ex.details = "direct_response" // Envoy's redirects are direct responses
		code := r.Redirect.Code
		if code == 0 {
			code = http.StatusMovedPermanently
		}
		rw.Header().Set("Location", redirectLocation(r.Redirect, req, rs))
		rw.Header().Set("Content-Length", "0")
		rw.WriteHeader(code)
		return nil
	case r.DirectStatus != 0:
		ex.details = "direct_response"
		w.localReply(rw, ex, r.DirectStatus, "")
		return nil
	}
	b := rs.pick(w)
	if b == nil || b.route.cluster == nil {
		code := r.ClusterNotFoundStatus
		if code == 0 {
			code = http.StatusServiceUnavailable
		}
		ex.flags |= respflag.NC
		ex.details = "cluster_not_found"
		w.localReply(rw, ex, code, "")
		return nil
	}
	if !b.cfg.RequestHeaders.Empty() {
		applyHeaders(req.Header, &b.cfg.RequestHeaders)
	}
	if !r.RequestHeaders.Empty() {
		applyHeaders(req.Header, &r.RequestHeaders)
	}
	rs.rewrite(req)
	if !b.cfg.ResponseHeaders.Empty() {
		ex.respHeaders[0] = &b.cfg.ResponseHeaders
	}
	if !r.ResponseHeaders.Empty() {
		ex.respHeaders[1] = &r.ResponseHeaders
	}
	return b.route
}

// applyResponseHeaders applies the response header changes of the
// request's rule and backend, if any, to an upstream response.
func (ex *activeStream) applyResponseHeaders(h http.Header) {
	for _, m := range ex.respHeaders {
		if m != nil {
			applyHeaders(h, m)
		}
	}
}
