package discovery

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// TestTranslateRouteConfiguration reads every field meshlet takes of a
// RouteConfiguration, each route keeping its place.
func TestTranslateRouteConfiguration(t *testing.T) {
	var rc routev3.RouteConfiguration
	fromYAML(t, `name: outbound|80||echo.default.svc.cluster.local
virtual_hosts:
- name: echo
  domains: ["*"]
  routes:
  - name: exact
    match: {path: /exact, headers: [{name: ":method", string_match: {exact: GET}}], query_parameters: [{name: q, string_match: {safe_regex: {regex: "[0-9]+"}}}]}
    route:
      cluster: v1
      timeout: 0s
      retry_policy: {retry_on: retriable-status-codes, num_retries: 2, retriable_status_codes: [503]}
    request_headers_to_add:
    - {header: {key: x-set, value: s}, append_action: OVERWRITE_IF_EXISTS_OR_ADD}
    - {header: {key: x-add, value: "50%%"}}
    - {header: {key: x-empty, value: ""}}
    request_headers_to_remove: [x-drop]
    response_headers_to_add: [{header: {key: x-resp, value: r}, append_action: OVERWRITE_IF_EXISTS_OR_ADD}]
    response_headers_to_remove: [server]
  - name: split
    match: {path_separated_prefix: /api, headers: [{name: x-version, string_match: {safe_regex: {regex: "v[12]"}}}]}
    route:
      weighted_clusters:
        clusters:
        - {name: v1, weight: 90, request_headers_to_add: [{header: {key: x-b, value: one}, append_action: OVERWRITE_IF_EXISTS_OR_ADD}]}
        - {name: v2, weight: 10, response_headers_to_remove: [x-internal]}
        - {name: "meshlet|invalid-backend|default/gone", weight: 0}
      cluster_not_found_response_code: INTERNAL_SERVER_ERROR
      timeout: 3s
      prefix_rewrite: /v2
      host_rewrite_literal: api.internal
  - name: regex
    match: {safe_regex: {regex: "/r/.*"}}
    route: {cluster: v2, regex_rewrite: {pattern: {regex: "^/r/(.*)$"}, substitution: "/\\1"}}
  - name: moved
    match: {prefix: /old}
    redirect: {scheme_redirect: https, host_redirect: example.org, port_redirect: 8443, prefix_rewrite: /new, response_code: PERMANENT_REDIRECT}
  - name: tls
    match: {prefix: /tls}
    redirect: {https_redirect: true, path_redirect: /secure}
  - name: broken
    match: {prefix: /}
    direct_response: {status: 500}
`, &rc)
	got, err := TranslateRouteConfiguration(&rc)
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultRetryPolicy()
	want := []config.RouteRule{
		{Name: "exact", Match: config.RouteMatch{PathKind: config.PathExact, Path: "/exact",
			Headers: []config.StringMatch{{Name: ":method", Exact: "GET"}}, Query: []config.StringMatch{{Name: "q", Regex: "[0-9]+"}}},
			Backends: []config.WeightedBackend{{Cluster: "v1", Weight: 1}}, ClusterNotFoundStatus: http.StatusServiceUnavailable, Timeout: 0,
			Retry: retry.Policy{RetryOn: retry.OnRetriableStatusCodes, NumRetries: 2, RetriableStatusCodes: []uint32{503},
				BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond, HostSelectionRetryMaxAttempts: 1},
			RequestHeaders: config.HeaderMutation{Set: []config.Header{{Name: "x-set", Value: "s"}}, Add: []config.Header{{Name: "x-add", Value: "50%"}},
				Remove: []string{"x-drop"}},
			ResponseHeaders: config.HeaderMutation{Set: []config.Header{{Name: "x-resp", Value: "r"}}, Remove: []string{"server"}}},
		{Name: "split", Match: config.RouteMatch{PathKind: config.PathSeparatedPrefix, Path: "/api",
			Headers: []config.StringMatch{{Name: "x-version", Regex: "v[12]"}}},
			Backends: []config.WeightedBackend{
				{Cluster: "v1", Weight: 90, RequestHeaders: config.HeaderMutation{Set: []config.Header{{Name: "x-b", Value: "one"}}}},
				{Cluster: "v2", Weight: 10, ResponseHeaders: config.HeaderMutation{Remove: []string{"x-internal"}}},
				{Cluster: "meshlet|invalid-backend|default/gone", Weight: 0}},
			ClusterNotFoundStatus: http.StatusInternalServerError, Timeout: 3 * time.Second, Retry: def,
			PrefixRewrite: "/v2", HostRewrite: "api.internal"},
		{Name: "regex", Match: config.RouteMatch{PathKind: config.PathRegex, Path: "/r/.*"}, Backends: []config.WeightedBackend{{Cluster: "v2", Weight: 1}},
			ClusterNotFoundStatus: http.StatusServiceUnavailable, Timeout: config.DefaultRouteTimeout, Retry: def, RegexRewrite: &config.RegexRewrite{Pattern: "^/r/(.*)$", Substitution: `/\1`}},
		{Name: "moved", Match: config.RouteMatch{PathKind: config.PathPrefix, Path: "/old"},
			Redirect: &config.Redirect{Scheme: "https", Host: "example.org", Port: 8443, PrefixRewrite: "/new", Code: http.StatusPermanentRedirect}},
		{Name: "tls", Match: config.RouteMatch{PathKind: config.PathPrefix, Path: "/tls"},
			Redirect: &config.Redirect{Scheme: "https", Path: "/secure", Code: http.StatusMovedPermanently}},
		{Name: "broken", Match: config.RouteMatch{PathKind: config.PathPrefix, Path: "/"}, DirectStatus: 500},
	}
	if !reflect.DeepEqual(got, want) {
		for i := range max(len(got), len(want)) {
			if i >= len(got) || i >= len(want) || !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("route %d:\n got %+v\nwant %+v", i, at(got, i), at(want, i))
			}
		}
	}
}

func at[T any](s []T, i int) any {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}

// TestTranslateRouteConfigurationRejects: what meshlet does not do is an
// error naming the field, never ignored.
func TestTranslateRouteConfigurationRejects(t *testing.T) {
	const head = "name: rc\nvirtual_hosts:\n- name: vh\n  domains: [\"*\"]\n  routes:\n"
	tests := []struct{ name, y, want string }{
		{"two virtual hosts", "name: rc\nvirtual_hosts: [{name: a, domains: ['*']}, {name: b, domains: [b]}]\n", "virtual_hosts: 2 virtual hosts"},
		{"domains without *", "name: rc\nvirtual_hosts: [{name: a, domains: [echo]}]\n", "virtual_hosts[0].domains"},
		{"virtual host headers", "name: rc\nvirtual_hosts: [{name: a, domains: ['*'], request_headers_to_remove: [x]}]\n",
			"virtual_hosts[0].request_headers_to_remove: not supported"},
		{"route configuration field", "name: rc\nvalidate_clusters: true\n", "validate_clusters: not supported"},
		{"no path specifier", head + "  - {match: {headers: [{name: a, string_match: {exact: b}}]}, route: {cluster: c}}\n", "routes[0].match.path_specifier: value is required"},
		{"case insensitive", head + "  - {match: {prefix: /, case_sensitive: false}, route: {cluster: c}}\n", "routes[0].match.case_sensitive"},
		{"presence match", head + "  - {match: {prefix: /, headers: [{name: a, present_match: true}]}, route: {cluster: c}}\n", "routes[0].match.headers[0].present_match: not supported"},
		{"bad regex", head + "  - {match: {safe_regex: {regex: '('}}, route: {cluster: c}}\n", "routes[0].match.safe_regex.regex"},
		{"ignore_case", head + "  - {match: {prefix: /, query_parameters: [{name: a, string_match: {exact: b, ignore_case: true}}]}, route: {cluster: c}}\n",
			"query_parameters[0].string_match.ignore_case: not supported"},
		{"prefix match kind", head + "  - {match: {prefix: /, headers: [{name: a, string_match: {prefix: b}}]}, route: {cluster: c}}\n", "string_match.prefix: not supported"},
		{"cluster_header", head + "  - {match: {prefix: /}, route: {cluster_header: x}}\n", "routes[0].route.cluster_header: not supported"},
		{"weights sum to 0", head + "  - {match: {prefix: /}, route: {weighted_clusters: {clusters: [{name: a, weight: 0}, {name: b, weight: 0}]}}}\n", "weights sum to 0"},
		{"regex too large", head + "  - {match: {safe_regex: {regex: '(?:.*a){100}b'}}, route: {cluster: c}}\n", "program size 303 over the limit of 100"},
		{"max_program_size", head + "  - {match: {safe_regex: {regex: 'a', google_re2: {max_program_size: 1000}}}, route: {cluster: c}}\n",
			"safe_regex.google_re2.max_program_size: not supported"},
		{"unknown substitution escape", head + "  - {match: {prefix: /}, route: {cluster: c, regex_rewrite: {pattern: {regex: '^/(.*)$'}, substitution: '/\\x'}}}\n",
			"regex_rewrite.substitution"},
		{"substitution group out of range", head + "  - {match: {prefix: /}, route: {cluster: c, regex_rewrite: {pattern: {regex: '^/(.*)$'}, substitution: '/\\2'}}}\n",
			"names a group the pattern does not have (it has 1)"},
		{"a %COMMAND% in a header value", head + "  - {match: {prefix: /}, route: {cluster: c}, request_headers_to_add: [{header: {key: a, value: '%DOWNSTREAM_REMOTE_ADDRESS%'}}]}\n",
			"request_headers_to_add[0].header.value"},
		{"pseudo-header match", head + "  - {match: {prefix: /, headers: [{name: ':path', string_match: {exact: /}}]}, route: {cluster: c}}\n", "headers[0].name: \":path\" not supported"},
		{"one weighted cluster of weight 0", head + "  - {match: {prefix: /}, route: {weighted_clusters: {clusters: [{name: a, weight: 0}]}}}\n", "weighted_clusters.clusters: the weights sum to 0"},
		{"hop-by-hop header", head + "  - {match: {prefix: /}, route: {cluster: c}, response_headers_to_add: [{header: {key: Transfer-Encoding, value: chunked}}]}\n", "is not a header name"},
		{"append action", head + "  - {match: {prefix: /}, route: {cluster: c}, request_headers_to_add: [{header: {key: a, value: b}, append_action: ADD_IF_ABSENT}]}\n",
			"request_headers_to_add[0].append_action: ADD_IF_ABSENT"},
		{"host header", head + "  - {match: {prefix: /}, route: {cluster: c}, request_headers_to_add: [{header: {key: host, value: b}}]}\n", "is not a header name"},
		{"hash policy", head + "  - {match: {prefix: /}, route: {cluster: c, hash_policy: [{header: {header_name: x}}]}}\n", "routes[0].route.hash_policy: not supported"},
		{"strip query", head + "  - {match: {prefix: /}, redirect: {strip_query: true}}\n", "routes[0].redirect.strip_query: not supported"},
		{"direct body", head + "  - {match: {prefix: /}, direct_response: {status: 200, body: {inline_string: x}}}\n", "direct_response.body: not supported"},
		{"decorator", head + "  - {match: {prefix: /}, route: {cluster: c}, decorator: {operation: x}}\n", "routes[0].decorator: not supported"},
		{"no action", head + "  - {match: {prefix: /}}\n", "routes[0].action: value is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rc routev3.RouteConfiguration
			fromYAML(t, tt.y, &rc)
			_, err := TranslateRouteConfiguration(&rc)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), `discovery: route configuration "rc": `) {
				t.Errorf("error %q does not name the route configuration", err)
			}
		})
	}
}
