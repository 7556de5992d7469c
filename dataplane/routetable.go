package dataplane

import (
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
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

// goSubstitution turns an RE2 substitution (\1 for a group, \\ for a
// backslash; config.Validate refused any other escape) into Go's
// (${1}), escaping the dollars Go would read as references.
func goSubstitution(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			b.WriteString("${")
			b.WriteByte(s[i+1])
			b.WriteByte('}')
			i++
		case c == '\\' && i+1 < len(s):
			b.WriteByte(s[i+1])
			i++
		case c == '$':
			b.WriteString("$$")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// matchRule returns the first rule the request matches, or nil. Only
// origin-form targets match (no CONNECT authority, no OPTIONS *), as
// Envoy's path matchers see only paths.
func (r *routeState) matchRule(req *http.Request) *ruleState {
	path := req.URL.EscapedPath()
	if !strings.HasPrefix(path, "/") || req.Method == http.MethodConnect {
		return nil
	}
	for _, rs := range r.rules {
		if rs.pathMatches(path) && headersMatch(rs.headers, req) && queryMatches(rs.query, req.URL.RawQuery) {
			return rs
		}
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

// queryMatches checks query parameter matchers against the raw query,
// as Envoy does: undecoded, the first occurrence of each name, with no
// limit on the number of parameters (net/url's decoding, its dropping of
// malformed pairs and its cap would each let a request slip past a rule).
func queryMatches(ms []valueMatch, rawQuery string) bool {
	for i := range ms {
		v, ok := queryParam(rawQuery, ms[i].name)
		if !ok || !ms[i].matches(v) {
			return false
		}
	}
	return true
}

// queryParam returns the raw value of the first parameter named name.
func queryParam(q, name string) (string, bool) {
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(pair, "=")
		if k == name {
			return v, true
		}
	}
	return "", false
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
		next = r.PrefixRewrite + path[rs.matchedPrefix(path):]
	}
	setEscapedPath(req.URL, rooted(next))
}

// matchedPrefix is how much of path the rule's match covers, what a
// prefix rewrite replaces: the prefix, or for an exact or regex match
// the whole path, as Envoy's.
func (rs *ruleState) matchedPrefix(path string) int {
	switch rs.cfg.Match.PathKind {
	case config.PathPrefix, config.PathSeparatedPrefix:
		return min(len(rs.cfg.Match.Path), len(path))
	}
	return len(path)
}

// rooted is path with a leading "/" (Envoy adds one to a rewritten or
// redirected path that lacks it), so a rewrite can never make a request
// target of another form, nor a redirect's path part of its host.
func rooted(path string) string {
	if strings.HasPrefix(path, "/") {
		return path
	}
	return "/" + path
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
// request's; a host_redirect is used as it is, without the request's
// port; otherwise the request's port stays unless a scheme change makes
// it the old scheme's default; a port that is the scheme's default is
// left out.
func redirectLocation(rd *config.Redirect, req *http.Request, rs *ruleState) string {
	scheme := "http"
	if req.TLS != nil {
		scheme = "https"
	}
	host, port := splitAuthority(req.Host)
	if strings.IndexByte(host, ':') >= 0 {
		host = "[" + host + "]" // an IPv6 literal
	}
	if rd.Scheme != "" && rd.Scheme != scheme {
		if port == defaultPort(scheme) {
			port = ""
		}
		scheme = rd.Scheme
	}
	if rd.Host != "" {
		host, port = rd.Host, ""
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
	case rd.PrefixRewrite != "":
		path = rd.PrefixRewrite + path[rs.matchedPrefix(path):]
	}
	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(host)
	if port != "" {
		b.WriteString(":" + port)
	}
	b.WriteString(rooted(path))
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
	if p := req.URL.EscapedPath(); needsNormalizing(p) {
		setEscapedPath(req.URL, normalizePath(p))
	}
	rs := table.matchRule(req)
	if rs == nil {
		ex.flags |= respflag.NR
		ex.details = "route_not_found"
		w.localReply(rw, ex, http.StatusNotFound, "")
		return nil
	}
	r := rs.cfg
	if !r.ResponseHeaders.Empty() {
		ex.respHeaders[1] = &r.ResponseHeaders // on the sidecar's own answers too
	}
	switch {
	case r.Redirect != nil:
		ex.details = "direct_response" // Envoy's redirects are direct responses
		code := r.Redirect.Code
		if code == 0 {
			code = http.StatusMovedPermanently
		}
		rw.Header().Set("Location", redirectLocation(r.Redirect, req, rs))
		rw.Header().Set("Content-Length", "0")
		ex.applyResponseHeaders(rw.Header())
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
	if r.PrefixRewrite != "" || rs.rewriteRe != nil {
		// The access log shows the path as received (after normalizing),
		// as Envoy's default format reads x-envoy-original-path.
		ex.origPath = h1.RequestTarget(req)
	}
	rs.rewrite(req)
	if !b.cfg.ResponseHeaders.Empty() {
		ex.respHeaders[0] = &b.cfg.ResponseHeaders
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

// needsNormalizing reports whether an escaped path may have dot segments
// or percent-encodings for normalizePath to resolve.
func needsNormalizing(p string) bool {
	return strings.IndexByte(p, '%') >= 0 || strings.Contains(p, "/.")
}

// normalizePath is RFC 3986 normalization of an escaped path, as Envoy's
// normalize_path (which Istio turns on) does before routing: the
// encodings of unreserved characters decoded, the others' hex upper case,
// then dot segments removed. %2F stays encoded (Istio's default keeps
// escaped slashes), and slashes are not merged. The result is also what
// goes upstream, so a rule and the application see the same path.
func normalizePath(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' && i+2 < len(p) && ishex(p[i+1]) && ishex(p[i+2]) {
			d := unhex(p[i+1])<<4 | unhex(p[i+2])
			if unreserved(d) {
				b.WriteByte(d)
			} else {
				b.WriteByte('%')
				b.WriteByte(upper(p[i+1]))
				b.WriteByte(upper(p[i+2]))
			}
			i += 2
			continue
		}
		b.WriteByte(c)
	}
	return removeDotSegments(b.String())
}

// removeDotSegments is RFC 3986 section 5.2.4 for an absolute path.
func removeDotSegments(p string) string {
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}

func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func ishex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
