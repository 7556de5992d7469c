package config

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/meshlet-dev/meshlet/internal/re2"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// RouteRule is one route of a route table (an Envoy Route of a
// RouteConfiguration's virtual host): a match and what a matching HTTP
// request gets. A Route with rules sends each request to the first rule
// that matches it, and answers 404 (flag NR) when none does, as Envoy.
type RouteRule struct {
	// Name is the route's name, for access logs and errors.
	Name  string
	Match RouteMatch
	// Exactly one of Backends, Redirect and DirectStatus says what the
	// request gets.
	//
	// Backends are the clusters a request is split across by weight (one
	// backend: no split). A backend naming a cluster the sidecar does not
	// have answers ClusterNotFoundStatus.
	Backends []WeightedBackend
	// Redirect answers with a redirect built from the request.
	Redirect *Redirect
	// DirectStatus answers with this status and no body of the backend's.
	DirectStatus int

	// ClusterNotFoundStatus is the status of a request whose backend
	// names no cluster (flag NC): 503 (Envoy's default), 500 (Gateway
	// API's answer for an invalid backend) or 404; 0 means 503.
	ClusterNotFoundStatus int
	// Timeout covers all attempts of a request (0 = no timeout).
	Timeout time.Duration
	Retry   retry.Policy
	// PrefixRewrite replaces the matched path prefix (Envoy's
	// prefix_rewrite): for an exact or regex match, the whole path.
	PrefixRewrite string
	// RegexRewrite replaces every match of its pattern in the path.
	RegexRewrite *RegexRewrite
	// HostRewrite replaces the request's host (Envoy's
	// host_rewrite_literal).
	HostRewrite string
	// RequestHeaders and ResponseHeaders change the request and the
	// response after the chosen backend's own changes (so the rule's win,
	// as Envoy applies the route's after the weighted cluster's); the
	// response's also apply to the sidecar's own answers for the rule.
	RequestHeaders, ResponseHeaders HeaderMutation
}

// PathMatchKind is how a RouteMatch compares the request's path.
type PathMatchKind string

// The path matches of Envoy's RouteMatch.
const (
	// PathPrefix matches a path that starts with Path (prefix).
	PathPrefix PathMatchKind = "prefix"
	// PathExact matches the path exactly (path).
	PathExact PathMatchKind = "exact"
	// PathSeparatedPrefix matches Path and Path followed by "/" or "?"
	// (path_separated_prefix): "/foo" matches "/foo" and "/foo/bar",
	// not "/foobar".
	PathSeparatedPrefix PathMatchKind = "separated_prefix"
	// PathRegex matches when the regular expression (RE2) matches the
	// whole path (safe_regex).
	PathRegex PathMatchKind = "regex"
)

// RouteMatch is what a request must have for its rule: a path (without
// the query), and every header and query parameter matcher.
type RouteMatch struct {
	PathKind PathMatchKind
	// Path is the prefix, the exact path or the regular expression.
	Path    string
	Headers []StringMatch
	// Query matches the request's query parameters by name.
	Query []StringMatch
}

// StringMatch matches a named value (a header, ":method" or
// ":authority", or a query parameter): the value must equal Exact, or
// match the whole regular expression Regex when it is set. A header sent
// several times matches as its values joined by ","; a query parameter by
// its first value, undecoded, as Envoy matches them. Header names compare
// without regard to case.
type StringMatch struct {
	Name  string
	Exact string
	Regex string
}

// WeightedBackend is one cluster of a split, with its share and the
// header changes that apply only to requests it receives.
type WeightedBackend struct {
	Cluster string
	// Weight is the backend's share of the rule's total weight; a backend
	// of weight 0 receives nothing.
	Weight                          uint32
	RequestHeaders, ResponseHeaders HeaderMutation
}

// Header is one header name and value.
type Header struct {
	Name, Value string
}

// HeaderMutation changes a request's or a response's headers: Set
// replaces every value of a name (adding it when absent), Add appends a
// value, Remove drops the name. Remove applies first, then Set, then Add,
// as Envoy applies headers_to_remove before headers_to_add.
type HeaderMutation struct {
	Set    []Header
	Add    []Header
	Remove []string
}

// Empty reports whether m changes nothing.
func (m *HeaderMutation) Empty() bool {
	return len(m.Set) == 0 && len(m.Add) == 0 && len(m.Remove) == 0
}

// Redirect is a redirect answer (Envoy's RedirectAction): the request's
// URL with the parts set here replaced. Path replaces the whole path;
// PrefixRewrite replaces the matched prefix. Port 0 keeps the request's
// port, except that a scheme change drops the port when it was the old
// scheme's default.
type Redirect struct {
	Scheme        string
	Host          string
	Port          uint32
	Path          string
	PrefixRewrite string
	// Code is 301, 302, 303, 307 or 308; 0 means 301 (Envoy's default).
	Code int
}

// RegexRewrite replaces each match of Pattern (RE2) in the path with
// Substitution, in which \1 ... \9 stand for the pattern's groups
// (Envoy's regex_rewrite).
type RegexRewrite struct {
	Pattern, Substitution string
}

// validateRules checks a route's rules; where names the route.
func validateRules(where string, rules []RouteRule) error {
	for i := range rules {
		if err := ValidateRule(fmt.Sprintf("%s.rules[%d]", where, i), &rules[i]); err != nil {
			return err
		}
	}
	return nil
}

// ValidateRule checks one rule on its own (what Validate checks of it);
// the errors name its fields below rw.
func ValidateRule(rw string, r *RouteRule) error {
	actions := 0
	if len(r.Backends) > 0 {
		actions++
	}
	if r.Redirect != nil {
		actions++
	}
	if r.DirectStatus != 0 {
		actions++
		if r.DirectStatus < 200 || r.DirectStatus > 599 {
			return fmt.Errorf("config: %s.direct_status: %d (want 200-599)", rw, r.DirectStatus)
		}
	}
	if actions != 1 {
		return fmt.Errorf("config: %s: want exactly one of backends, redirect and direct_status (have %d)", rw, actions)
	}
	switch r.ClusterNotFoundStatus {
	case 0, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusNotFound:
	default:
		return fmt.Errorf("config: %s.cluster_not_found_status: %d (want 503, 500 or 404)", rw, r.ClusterNotFoundStatus)
	}
	if r.Timeout < 0 {
		return fmt.Errorf("config: %s.timeout: %v must be >= 0", rw, r.Timeout)
	}
	if err := r.Match.validate(rw + ".match"); err != nil {
		return err
	}
	if r.PrefixRewrite != "" && r.RegexRewrite != nil {
		return fmt.Errorf("config: %s: prefix_rewrite and regex_rewrite are exclusive", rw)
	}
	if rr := r.RegexRewrite; rr != nil {
		re, err := CompileRegex(rr.Pattern)
		if err != nil {
			return fmt.Errorf("config: %s.regex_rewrite.pattern %q: %v", rw, rr.Pattern, err)
		}
		if err := checkSubstitution(rr.Substitution, re.NumSubexp()); err != nil {
			return fmt.Errorf("config: %s.regex_rewrite.substitution %q: %v", rw, rr.Substitution, err)
		}
	}
	total := uint64(0)
	for j, b := range r.Backends {
		bw := fmt.Sprintf("%s.backends[%d]", rw, j)
		if b.Cluster == "" {
			return fmt.Errorf("config: %s.cluster: empty", bw)
		}
		if err := b.RequestHeaders.validate(bw + ".request_headers"); err != nil {
			return err
		}
		if err := b.ResponseHeaders.validate(bw + ".response_headers"); err != nil {
			return err
		}
		total += uint64(b.Weight)
	}
	if len(r.Backends) > 1 && total == 0 {
		return fmt.Errorf("config: %s.backends: the weights sum to 0", rw)
	}
	if total > 1<<32-1 {
		return fmt.Errorf("config: %s.backends: the weights sum to %d (at most %d)", rw, total, uint64(1<<32-1))
	}
	if rd := r.Redirect; rd != nil {
		switch rd.Code {
		case 0, 301, 302, 303, 307, 308:
		default:
			return fmt.Errorf("config: %s.redirect.code: %d (want 301, 302, 303, 307 or 308)", rw, rd.Code)
		}
		switch rd.Scheme {
		case "", "http", "https":
		default:
			return fmt.Errorf("config: %s.redirect.scheme: %q (want http or https)", rw, rd.Scheme)
		}
		if rd.Port > 65535 {
			return fmt.Errorf("config: %s.redirect.port: %d out of range", rw, rd.Port)
		}
		if rd.Path != "" && rd.PrefixRewrite != "" {
			return fmt.Errorf("config: %s.redirect: path and prefix_rewrite are exclusive", rw)
		}
		if rd.Path != "" && !strings.HasPrefix(rd.Path, "/") {
			return fmt.Errorf("config: %s.redirect.path: %q must start with /", rw, rd.Path)
		}
	}
	if err := r.RequestHeaders.validate(rw + ".request_headers"); err != nil {
		return err
	}
	if err := r.ResponseHeaders.validate(rw + ".response_headers"); err != nil {
		return err
	}
	return nil
}

func (m *RouteMatch) validate(where string) error {
	switch m.PathKind {
	case PathPrefix, PathExact, PathSeparatedPrefix:
		if !strings.HasPrefix(m.Path, "/") && !(m.PathKind == PathPrefix && m.Path == "") {
			return fmt.Errorf("config: %s.path: %q must start with /", where, m.Path)
		}
	case PathRegex:
		if _, err := CompileRegex(m.Path); err != nil {
			return fmt.Errorf("config: %s.path: regex %q: %v", where, m.Path, err)
		}
	default:
		return fmt.Errorf("config: %s.path_kind: %q (want prefix, exact, separated_prefix or regex)", where, m.PathKind)
	}
	for _, list := range []struct {
		field string
		ms    []StringMatch
	}{{"headers", m.Headers}, {"query", m.Query}} {
		for i, sm := range list.ms {
			if sm.Name == "" {
				return fmt.Errorf("config: %s.%s[%d].name: empty", where, list.field, i)
			}
			if sm.Regex != "" {
				if _, err := CompileRegex(sm.Regex); err != nil {
					return fmt.Errorf("config: %s.%s[%d].regex %q: %v", where, list.field, i, sm.Regex, err)
				}
			}
		}
	}
	return nil
}

func (m *HeaderMutation) validate(where string) error {
	for _, list := range []struct {
		field string
		hs    []Header
	}{{"set", m.Set}, {"add", m.Add}} {
		for i, h := range list.hs {
			if !validHeaderName(h.Name) {
				return fmt.Errorf("config: %s.%s[%d].name: %q is not a header name", where, list.field, i, h.Name)
			}
			if strings.ContainsAny(h.Value, "\r\n\x00") {
				return fmt.Errorf("config: %s.%s[%d].value: %q holds a line break or NUL", where, list.field, i, h.Value)
			}
		}
	}
	for i, name := range m.Remove {
		if !validHeaderName(name) {
			return fmt.Errorf("config: %s.remove[%d]: %q is not a header name", where, i, name)
		}
	}
	return nil
}

// unchangeable are the headers a rule may not touch: the host (a rewrite
// changes it), hop-by-hop headers and the message's framing, which the
// proxy owns.
var unchangeable = []string{"host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade",
	"trailer", "content-length"}

// validHeaderName reports whether s is an RFC 9110 token that a rule may
// set or remove (no pseudo-header, nothing in unchangeable).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, u := range unchangeable {
		if strings.EqualFold(s, u) {
			return false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// MaxRegexProgramSize bounds the compiled size of a route's regular
// expressions, as Envoy's re2.max_program_size.error_level does (see
// package internal/re2).
const MaxRegexProgramSize = re2.MaxProgramSize

// CompileRegex compiles a route's regular expression (RE2 syntax),
// refusing one whose program is larger than MaxRegexProgramSize
// instructions.
func CompileRegex(expr string) (*regexp.Regexp, error) { return re2.Compile(expr) }

// checkSubstitution checks a regex rewrite's substitution as RE2 does:
// \\ is a backslash, \0 to \9 a group the pattern has, any other
// backslash an error.
func checkSubstitution(sub string, groups int) error {
	for i := 0; i < len(sub); i++ {
		if sub[i] != '\\' {
			continue
		}
		if i+1 == len(sub) {
			return fmt.Errorf("a trailing backslash")
		}
		switch c := sub[i+1]; {
		case c == '\\':
		case c >= '0' && c <= '9':
			if int(c-'0') > groups {
				return fmt.Errorf("\\%c names a group the pattern does not have (it has %d)", c, groups)
			}
		default:
			return fmt.Errorf("\\%c is not an escape (want \\0-\\9 or \\\\)", c)
		}
		i++
	}
	return nil
}
