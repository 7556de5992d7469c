package xds

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// The Service annotations meshlet reads; ../ANNOTATIONS.md is their
// reference table.
const (
	AnnotationLBPolicy                  = "meshlet.io/lb-policy"
	AnnotationZoneAware                 = "meshlet.io/zone-aware"
	AnnotationLocalityWeighted          = "meshlet.io/locality-weighted"
	AnnotationOverprovisioningFactor    = "meshlet.io/overprovisioning-factor"
	AnnotationFailoverLabels            = "meshlet.io/failover-labels"
	AnnotationOutlierConsecutive5xx     = "meshlet.io/outlier-consecutive-5xx"
	AnnotationOutlierInterval           = "meshlet.io/outlier-interval"
	AnnotationOutlierBaseEjectionTime   = "meshlet.io/outlier-base-ejection-time"
	AnnotationOutlierMaxEjectionPercent = "meshlet.io/outlier-max-ejection-percent"
	AnnotationConnectTimeout            = "meshlet.io/connect-timeout"
	AnnotationTimeout                   = "meshlet.io/timeout"
	AnnotationRetries                   = "meshlet.io/retries"
	AnnotationRetryOn                   = "meshlet.io/retry-on"
	AnnotationPerTryTimeout             = "meshlet.io/per-try-timeout"
)

// serviceAnnotations lists them all, for the misspelling check.
var serviceAnnotations = []string{
	AnnotationLBPolicy, AnnotationZoneAware, AnnotationLocalityWeighted, AnnotationOverprovisioningFactor,
	AnnotationFailoverLabels, AnnotationOutlierConsecutive5xx, AnnotationOutlierInterval,
	AnnotationOutlierBaseEjectionTime, AnnotationOutlierMaxEjectionPercent, AnnotationConnectTimeout,
	AnnotationTimeout, AnnotationRetries, AnnotationRetryOn, AnnotationPerTryTimeout,
}

// failoverLabels are the labels meshlet.io/failover-labels may name: the
// ones every endpoint's locality has.
var failoverLabels = []string{lb.LabelRegion, lb.LabelZone, lb.LabelSubZone}

// AnnotationError is a Service annotation that cannot be used. The
// Service is then left out of what the sidecars receive.
type AnnotationError struct {
	Service    types.NamespacedName
	Annotation string
	Value      string
	Reason     string
}

// Error names the Service, the annotation, its value and why it is bad.
func (e *AnnotationError) Error() string {
	return fmt.Sprintf("xds: service %s: annotation %s=%q: %s", e.Service, e.Annotation, e.Value, e.Reason)
}

// serviceSettings are a Service's annotations, parsed.
type serviceSettings struct {
	policy           clusterv3.Cluster_LbPolicy
	zoneAware        *clusterv3.Cluster_CommonLbConfig_ZoneAwareLbConfig // nil: Envoy's defaults
	localityWeighted bool
	opf              uint32 // 0: Envoy's default
	failover         []string
	outlier          *clusterv3.OutlierDetection
	connectTimeout   *durationpb.Duration
	timeout          *durationpb.Duration
	retry            *routev3.RetryPolicy
}

// parseAnnotations reads the annotations of svc; the first bad one (in
// the order of serviceAnnotations) is an *AnnotationError.
func parseAnnotations(svc *corev1.Service) (serviceSettings, error) {
	var s serviceSettings
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	ann := svc.Annotations
	bad := func(a, reason string, args ...any) error {
		return &AnnotationError{Service: key, Annotation: a, Value: ann[a], Reason: fmt.Sprintf(reason, args...)}
	}
	for _, k := range slices.Sorted(maps.Keys(ann)) {
		if near := misspelt(k); near != "" {
			return s, bad(k, "unknown annotation (did you mean %s?)", near)
		}
	}
	if v, ok := ann[AnnotationLBPolicy]; ok {
		p, err := lb.ParsePolicy(v)
		if err != nil {
			return s, bad(AnnotationLBPolicy, "unknown policy (want round-robin, least-request, random, ring-hash or maglev)")
		}
		s.policy = clusterv3.Cluster_LbPolicy(clusterv3.Cluster_LbPolicy_value[p.String()])
	}
	zoneAwareOn := false
	if v, ok := ann[AnnotationZoneAware]; ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "off", "false":
			s.zoneAware = &clusterv3.Cluster_CommonLbConfig_ZoneAwareLbConfig{RoutingEnabled: &typev3.Percent{Value: 0}}
		case "on", "true":
			zoneAwareOn = true
		default:
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return s, bad(AnnotationZoneAware, "want off, on or a minimum cluster size (a whole number)")
			}
			zoneAwareOn = true
			s.zoneAware = &clusterv3.Cluster_CommonLbConfig_ZoneAwareLbConfig{MinClusterSize: wrapperspb.UInt64(n)}
		}
	}
	if v, ok := ann[AnnotationLocalityWeighted]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return s, bad(AnnotationLocalityWeighted, "want true or false")
		}
		if b && zoneAwareOn {
			return s, bad(AnnotationLocalityWeighted, "cannot be combined with %s=%q (Envoy makes them exclusive; set %s to off)",
				AnnotationZoneAware, ann[AnnotationZoneAware], AnnotationZoneAware)
		}
		s.localityWeighted = b
		if b {
			s.zoneAware = nil
		}
	}
	if _, ok := ann[AnnotationOverprovisioningFactor]; ok {
		n, err := parseUint(ann[AnnotationOverprovisioningFactor], 1, math.MaxUint32)
		if err != nil {
			return s, bad(AnnotationOverprovisioningFactor, "want a percentage >= 1 (Envoy's default is 140)")
		}
		s.opf = uint32(n)
	}
	if v, ok := ann[AnnotationFailoverLabels]; ok {
		for l := range strings.SplitSeq(v, ",") {
			l = strings.TrimSpace(l)
			switch {
			case !slices.Contains(failoverLabels, l):
				return s, bad(AnnotationFailoverLabels, "label %q not supported (want a comma-separated list of %s)", l, strings.Join(failoverLabels, ", "))
			case slices.Contains(s.failover, l):
				return s, bad(AnnotationFailoverLabels, "label %q listed twice", l)
			}
			s.failover = append(s.failover, l)
		}
	}
	if err := parseOutlier(ann, &s, bad); err != nil {
		return s, err
	}
	var err error
	if s.connectTimeout, err = parseDuration(ann, AnnotationConnectTimeout, true, bad); err != nil {
		return s, err
	}
	if s.timeout, err = parseDuration(ann, AnnotationTimeout, false, bad); err != nil {
		return s, err
	}
	if err := parseRetry(ann, &s, bad); err != nil {
		return s, err
	}
	return s, nil
}

// parseOutlier reads the outlier-detection annotations; any of them turns
// outlier detection on, with Envoy's defaults for the others.
func parseOutlier(ann map[string]string, s *serviceSettings, bad func(a, reason string, args ...any) error) error {
	var od clusterv3.OutlierDetection
	set := false
	if v, ok := ann[AnnotationOutlierConsecutive5xx]; ok {
		n, err := parseUint(v, 0, math.MaxUint32)
		if err != nil {
			return bad(AnnotationOutlierConsecutive5xx, "want a whole number of responses (Envoy's default is 5)")
		}
		od.Consecutive_5Xx, set = wrapperspb.UInt32(uint32(n)), true
	}
	if v, ok := ann[AnnotationOutlierMaxEjectionPercent]; ok {
		n, err := parseUint(v, 0, 100)
		if err != nil {
			return bad(AnnotationOutlierMaxEjectionPercent, "want a percentage from 0 to 100 (Envoy's default is 10)")
		}
		od.MaxEjectionPercent, set = wrapperspb.UInt32(uint32(n)), true
	}
	for _, d := range []struct {
		key string
		dst **durationpb.Duration
	}{{AnnotationOutlierInterval, &od.Interval}, {AnnotationOutlierBaseEjectionTime, &od.BaseEjectionTime}} {
		v, err := parseDuration(ann, d.key, true, bad)
		if err != nil {
			return err
		}
		if v != nil {
			*d.dst, set = v, true
		}
	}
	if set {
		s.outlier = &od
	}
	return nil
}

// parseRetry reads the retry annotations into a route retry_policy; unset
// ones keep meshlet's defaults (one retry on connect-failure and
// refused-stream, discovery.DefaultRetryPolicy).
func parseRetry(ann map[string]string, s *serviceSettings, bad func(a, reason string, args ...any) error) error {
	rp := routev3.RetryPolicy{RetryOn: retry.DefaultOn.String(), NumRetries: wrapperspb.UInt32(1)}
	set := false
	if v, ok := ann[AnnotationRetries]; ok {
		n, err := parseUint(v, 0, math.MaxUint32)
		if err != nil {
			return bad(AnnotationRetries, "want a whole number of retries (0 disables retries)")
		}
		rp.NumRetries, set = wrapperspb.UInt32(uint32(n)), true
	}
	if v, ok := ann[AnnotationRetryOn]; ok {
		if _, err := retry.ParseOn(v); err != nil {
			return bad(AnnotationRetryOn, "%s", strings.TrimPrefix(err.Error(), "retry: retry_on: "))
		}
		rp.RetryOn, set = strings.TrimSpace(v), true
	}
	d, err := parseDuration(ann, AnnotationPerTryTimeout, true, bad)
	if err != nil {
		return err
	}
	if d != nil {
		rp.PerTryTimeout, set = d, true
	}
	if set {
		s.retry = &rp
	}
	return nil
}

// parseDuration reads a Go duration annotation ("250ms", "2s"); positive
// requires > 0, else 0 is allowed (and means "none"). Unset gives nil.
func parseDuration(ann map[string]string, key string, positive bool, bad func(a, reason string, args ...any) error) (*durationpb.Duration, error) {
	v, ok := ann[key]
	if !ok {
		return nil, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	switch {
	case err != nil:
		return nil, bad(key, "not a duration (want Go syntax such as 500ms or 2s)")
	case positive && d <= 0:
		return nil, bad(key, "must be > 0")
	case d < 0:
		return nil, bad(key, "must be >= 0")
	}
	return durationpb.New(d), nil
}

// parseUint reads a whole number in [lo, hi].
func parseUint(v string, lo, hi uint64) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, err
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d not in [%d, %d]", n, lo, hi)
	}
	return n, nil
}

// misspelt returns the Service annotation k is probably a misspelling of,
// or "". Other meshlet.io/ annotations (the webhook's pod annotations
// share the prefix) are not meshlet's business on a Service and are
// ignored; a near miss of one of ours is surely a typo.
func misspelt(k string) string {
	rest, ok := strings.CutPrefix(k, "meshlet.io/")
	if !ok || slices.Contains(serviceAnnotations, k) {
		return ""
	}
	for _, a := range serviceAnnotations {
		if editDistance(rest, strings.TrimPrefix(a, "meshlet.io/")) <= 2 {
			return a
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
