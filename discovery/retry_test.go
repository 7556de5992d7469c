package discovery

import (
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshlet-dev/meshlet/lb/retry"
)

func TestTranslateRetryPolicy(t *testing.T) {
	tests := []struct {
		name string
		y    string // "" means a nil policy
		want retry.Policy
	}{
		{"nil is meshlet's default", "", retry.Policy{RetryOn: retry.OnConnectFailure | retry.OnRefusedStream, NumRetries: 1,
			BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond, HostSelectionRetryMaxAttempts: 1}},
		{"num_retries defaults to 1", "retry_on: 5xx\n", retry.Policy{RetryOn: retry.On5xx, NumRetries: 1,
			BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond, HostSelectionRetryMaxAttempts: 1}},
		{"every field", `retry_on: "5xx, connect-failure,retriable-status-codes,unavailable"
num_retries: 3
per_try_timeout: 1.5s
retriable_status_codes: [409, 503]
retry_back_off: {base_interval: 0.1s, max_interval: 2s}
retry_host_predicate:
  - name: envoy.retry_host_predicates.previous_hosts
    typed_config: {"@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}
host_selection_retry_max_attempts: 5
`, retry.Policy{RetryOn: retry.On5xx | retry.OnConnectFailure | retry.OnRetriableStatusCodes | retry.OnGRPCUnavailable,
			NumRetries: 3, PerTryTimeout: 1500 * time.Millisecond, RetriableStatusCodes: []uint32{409, 503},
			BaseInterval: 100 * time.Millisecond, MaxInterval: 2 * time.Second, HostSelectionRetryMaxAttempts: 5}},
		{"back-off max defaults to 10 x base", "retry_on: reset\nretry_back_off: {base_interval: 0.05s}\n", retry.Policy{RetryOn: retry.OnReset, NumRetries: 1,
			BaseInterval: 50 * time.Millisecond, MaxInterval: 500 * time.Millisecond, HostSelectionRetryMaxAttempts: 1}},
		{"previous_hosts by name", "retry_on: reset\nretry_host_predicate: [{name: envoy.retry_host_predicates.previous_hosts}]\n", retry.Policy{RetryOn: retry.OnReset, NumRetries: 1,
			BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond, HostSelectionRetryMaxAttempts: 1}},
		{"previous_priorities", `retry_on: 5xx
num_retries: 3
retry_priority:
  name: envoy.retry_priorities.previous_priorities
  typed_config: {"@type": type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig, update_frequency: 2}
`, retry.Policy{RetryOn: retry.On5xx, NumRetries: 3, BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond,
			HostSelectionRetryMaxAttempts: 1, RetryPriorityUpdateFrequency: 2}},
		// Next to typed_config the name is informational: Envoy finds the
		// plugin by the config's type.
		{"previous_priorities under another name", "retry_priority: {name: spread, typed_config: {\"@type\": type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig, update_frequency: 1}}\n",
			retry.Policy{NumRetries: 1, BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond,
				HostSelectionRetryMaxAttempts: 1, RetryPriorityUpdateFrequency: 1}},
		{"num_retries 0 retries nothing", "retry_on: 5xx\nnum_retries: 0\n", retry.Policy{NumRetries: 0,
			BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond, HostSelectionRetryMaxAttempts: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p *routev3.RetryPolicy
			if tt.y != "" {
				p = &routev3.RetryPolicy{}
				fromYAML(t, tt.y, p)
			}
			got, err := TranslateRetryPolicy(p)
			if err != nil {
				t.Fatal(err)
			}
			eq(t, got, tt.want)
		})
	}
}

func TestTranslateRetryPolicyErrors(t *testing.T) {
	tests := []struct {
		name, y string
		parts   []string
	}{
		{"bad retry_on", "retry_on: 5xx,sometimes\n", []string{`retry_policy: retry_on: "5xx,sometimes": unknown condition "sometimes"`}},
		{"bad status code", "retriable_status_codes: [99]\n", []string{"retriable_status_codes[0]: 99 is not an HTTP status"}},
		{"back-off without base", "retry_back_off: {max_interval: 1s}\n", []string{"retry_back_off.base_interval: required"}},
		{"back-off max below base", "retry_back_off: {base_interval: 1s, max_interval: 0.5s}\n", []string{"retry_back_off.max_interval: 500ms < base_interval 1s"}},
		{"other host predicate", "retry_host_predicate: [{name: envoy.retry_host_predicates.omit_canary_hosts}]\n",
			[]string{`retry_host_predicate[0].name: "envoy.retry_host_predicates.omit_canary_hosts" not supported`}},
		{"other predicate type", "retry_host_predicate: [{name: x, typed_config: {\"@type\": type.googleapis.com/envoy.config.core.v3.Http1ProtocolOptions}}]\n",
			[]string{"retry_host_predicate[0].typed_config.@type"}},
		{"attempts without predicate", "host_selection_retry_max_attempts: 3\n", []string{"host_selection_retry_max_attempts: needs retry_host_predicate"}},
		{"negative attempts", "retry_host_predicate: [{name: envoy.retry_host_predicates.previous_hosts}]\nhost_selection_retry_max_attempts: -1\n", []string{"host_selection_retry_max_attempts: -1 out of range"}},
		// Envoy gives the bare form an empty config, whose update_frequency
		// 0 fails validation.
		{"previous_priorities by name only", "retry_priority: {name: envoy.retry_priorities.previous_priorities}\n",
			[]string{"retry_policy: retry_priority.typed_config: required: envoy.retry_priorities.previous_priorities needs update_frequency > 0",
				"envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig"}},
		{"other retry priority", "retry_priority: {name: envoy.retry_priorities.omit_canary}\n",
			[]string{`retry_policy: retry_priority.name: "envoy.retry_priorities.omit_canary" not supported (want envoy.retry_priorities.previous_priorities)`}},
		{"other retry priority type", "retry_priority: {name: x, typed_config: {\"@type\": type.googleapis.com/envoy.config.core.v3.Http1ProtocolOptions}}\n",
			[]string{"retry_policy: retry_priority.typed_config.@type: type.googleapis.com/envoy.config.core.v3.Http1ProtocolOptions not supported"}},
		{"update_frequency 0", "retry_priority: {name: envoy.retry_priorities.previous_priorities, typed_config: {\"@type\": type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig}}\n",
			[]string{"retry_policy: retry_priority.typed_config.update_frequency: 0 must be > 0"}},
		{"retry_priority without name", "retry_priority: {typed_config: {\"@type\": type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig, update_frequency: 1}}\n",
			[]string{"retry_policy: retry_priority.name: value length must be at least 1"}},
		{"negative update_frequency", "retry_priority: {name: envoy.retry_priorities.previous_priorities, typed_config: {\"@type\": type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig, update_frequency: -3}}\n",
			[]string{"retry_policy: retry_priority.typed_config.update_frequency: -3 must be > 0"}},
		{"retriable_headers", "retriable_headers: [{name: x-retry}]\n", []string{"retriable_headers: not supported"}},
		{"rate_limited_retry_back_off", "rate_limited_retry_back_off: {reset_headers: [{name: Retry-After}]}\n", []string{"rate_limited_retry_back_off: not supported"}},
		{"negative per_try_timeout", "per_try_timeout: -1s\n", []string{"per_try_timeout: -1s must be >= 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p routev3.RetryPolicy
			fromYAML(t, tt.y, &p)
			_, err := TranslateRetryPolicy(&p)
			wantErr(t, err, tt.parts...)
		})
	}
}
