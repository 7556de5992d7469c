package discovery

import (
	"fmt"
	"math"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"

	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// previousHostsPredicate is the one retry host predicate meshlet has.
const previousHostsPredicate = "envoy.retry_host_predicates.previous_hosts"

// DefaultRetryPolicy is the policy of a route that configures none:
// retry.DefaultOn (connect-failure, refused-stream) with one retry and
// lb's back-off defaults, failures where the request provably never
// reached the application. Envoy has no such default (no policy, no
// retries).
func DefaultRetryPolicy() retry.Policy {
	return retry.Policy{RetryOn: retry.DefaultOn, NumRetries: 1}.WithDefaults()
}

// TranslateRetryPolicy translates an Envoy v3 route RetryPolicy: retry_on,
// num_retries (default 1), per_try_timeout, retriable_status_codes,
// retry_back_off, the previous_hosts retry host predicate with
// host_selection_retry_max_attempts and the previous_priorities retry
// priority. A nil policy gives
// DefaultRetryPolicy. The result has retry.Policy.WithDefaults applied;
// num_retries 0 also clears RetryOn, so that no retry happens even if a
// caller applies WithDefaults again (which reads NumRetries 0 as unset).
//
// retry.Policy cannot say "no retry_host_predicate": its
// HostSelectionRetryMaxAttempts of 0 means the default, one re-pick of an
// already tried host. So meshlet always steers retries away from tried
// hosts (as Istio configures every route), where Envoy without the
// predicate would not.
func TranslateRetryPolicy(p *routev3.RetryPolicy) (retry.Policy, error) {
	out, err := translateRetryPolicy("", p)
	if err != nil {
		return retry.Policy{}, fmt.Errorf("discovery: retry_policy: %w", err)
	}
	return out, nil
}

// translateRetryPolicy is TranslateRetryPolicy with errors below p.
func translateRetryPolicy(p path, rp *routev3.RetryPolicy) (retry.Policy, error) {
	if rp == nil {
		return DefaultRetryPolicy(), nil
	}
	var out retry.Policy
	if err := rejectUnsupported(p, rp, "retry_on", "num_retries", "per_try_timeout", "retriable_status_codes",
		"retry_back_off", "retry_host_predicate", "host_selection_retry_max_attempts", "retry_priority"); err != nil {
		return out, err
	}
	var err error
	if out.RetryOn, err = retry.ParseOn(rp.GetRetryOn()); err != nil {
		return out, p.field("retry_on").errorf("%q: %v", rp.GetRetryOn(), unprefixed(err))
	}
	if out.PerTryTimeout, err = optDuration(p.field("per_try_timeout"), rp.GetPerTryTimeout(), 0); err != nil {
		return out, err
	}
	for i, code := range rp.GetRetriableStatusCodes() {
		if code < 100 || code > 599 {
			return out, p.field("retriable_status_codes").index(i).errorf("%d is not an HTTP status", code)
		}
		out.RetriableStatusCodes = append(out.RetriableStatusCodes, code)
	}
	if bo := rp.GetRetryBackOff(); bo != nil {
		bp := p.field("retry_back_off")
		if err := rejectUnsupported(bp, bo, "base_interval", "max_interval"); err != nil {
			return out, err
		}
		if out.BaseInterval, err = requiredDuration(bp.field("base_interval"), bo.GetBaseInterval()); err != nil {
			return out, err
		}
		if bo.GetMaxInterval() != nil {
			if out.MaxInterval, err = positiveDuration(bp.field("max_interval"), bo.GetMaxInterval()); err != nil {
				return out, err
			}
			if out.MaxInterval < out.BaseInterval {
				return out, bp.field("max_interval").errorf("%v < base_interval %v", out.MaxInterval, out.BaseInterval)
			}
		}
	}
	if err := translateHostPredicates(p, rp, &out); err != nil {
		return out, err
	}
	if out.RetryPriorityUpdateFrequency, err = translateRetryPriority(p.field("retry_priority"), rp.GetRetryPriority()); err != nil {
		return out, err
	}
	out = out.WithDefaults()
	if n := rp.GetNumRetries(); n != nil {
		out.NumRetries = n.GetValue()
		if out.NumRetries == 0 {
			out.RetryOn = 0
		}
	}
	if err := validateProto(p, rp); err != nil {
		return retry.Policy{}, err
	}
	return out, nil
}

// translateHostPredicates reads retry_host_predicate (previous_hosts only)
// and host_selection_retry_max_attempts (default 1), which needs it.
func translateHostPredicates(p path, rp *routev3.RetryPolicy, out *retry.Policy) error {
	for i, pred := range rp.GetRetryHostPredicate() {
		pp := p.field("retry_host_predicate").index(i)
		if err := rejectUnsupported(pp, pred, "name", "typed_config"); err != nil {
			return err
		}
		if tc := pred.GetTypedConfig(); tc != nil {
			var ph previoushostsv3.PreviousHostsPredicate
			if err := tc.UnmarshalTo(&ph); err != nil {
				return pp.field("typed_config").field("@type").errorf("%s not supported (want type.googleapis.com/%s)",
					tc.GetTypeUrl(), (&ph).ProtoReflect().Descriptor().FullName())
			}
			continue
		}
		if pred.GetName() != previousHostsPredicate {
			return pp.field("name").errorf("%q not supported (want %s)", pred.GetName(), previousHostsPredicate)
		}
	}
	n := rp.GetHostSelectionRetryMaxAttempts()
	switch {
	case n < 0 || n > math.MaxUint32:
		return p.field("host_selection_retry_max_attempts").errorf("%d out of range", n)
	case n > 0 && len(rp.GetRetryHostPredicate()) == 0:
		return p.field("host_selection_retry_max_attempts").errorf("needs retry_host_predicate %s", previousHostsPredicate)
	}
	out.HostSelectionRetryMaxAttempts = uint32(n)
	return nil
}

// translateRetryPriority reads retry_priority, which must be
// previous_priorities given as typed_config with update_frequency > 0, and
// returns the update frequency (0: no retry_priority). The bare form {name:
// envoy.retry_priorities.previous_priorities} is refused as Envoy refuses
// it: the plugin then gets an empty config, whose update_frequency 0 fails
// validation.
func translateRetryPriority(p path, rp *routev3.RetryPolicy_RetryPriority) (uint32, error) {
	if rp == nil {
		return 0, nil
	}
	if err := rejectUnsupported(p, rp, "name", "typed_config"); err != nil {
		return 0, err
	}
	var cfg previousprioritiesv3.PreviousPrioritiesConfig
	want := "type.googleapis.com/" + string(cfg.ProtoReflect().Descriptor().FullName())
	tc := rp.GetTypedConfig()
	if tc == nil {
		if rp.GetName() != lb.PreviousPrioritiesName {
			return 0, p.field("name").errorf("%q not supported (want %s)", rp.GetName(), lb.PreviousPrioritiesName)
		}
		return 0, p.field("typed_config").errorf("required: %s needs update_frequency > 0 (typed_config {\"@type\": %s, update_frequency: N})",
			lb.PreviousPrioritiesName, want)
	}
	if err := tc.UnmarshalTo(&cfg); err != nil {
		return 0, p.field("typed_config").field("@type").errorf("%s not supported (want %s)", tc.GetTypeUrl(), want)
	}
	if cfg.GetUpdateFrequency() <= 0 {
		return 0, p.field("typed_config").field("update_frequency").errorf("%d must be > 0", cfg.GetUpdateFrequency())
	}
	return uint32(cfg.GetUpdateFrequency()), nil
}

// unprefixed strips lb's "retry: retry_on: " style prefix from err so the
// message is not doubled under our own path.
func unprefixed(err error) string {
	s := err.Error()
	const prefix = "retry: retry_on: "
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}
