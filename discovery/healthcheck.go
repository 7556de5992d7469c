package discovery

import (
	"encoding/hex"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshlet-dev/meshlet/config"
)

// healthCheckFields are the HealthCheck fields meshlet reads. name only
// labels the checker. reuse_connection is read: meshlet only reuses
// connections, Envoy's default, so false is rejected.
var healthCheckFields = []string{
	"name", "timeout", "interval", "initial_jitter", "interval_jitter", "interval_jitter_percent",
	"unhealthy_threshold", "healthy_threshold", "reuse_connection",
	"no_traffic_interval", "no_traffic_healthy_interval", "unhealthy_interval",
	"unhealthy_edge_interval", "healthy_edge_interval",
	"http_health_check", "tcp_health_check", "grpc_health_check",
}

// translateHealthCheck reads one active health check of cluster. Unset
// optional intervals take Envoy's defaults (HealthCheckConfig.WithDefaults);
// an HTTP check's host defaults to the cluster name, as in Envoy.
func translateHealthCheck(p path, hc *corev3.HealthCheck, cluster string) (config.HealthCheck, error) {
	var out config.HealthCheck
	if err := rejectUnsupported(p, hc, healthCheckFields...); err != nil {
		return out, err
	}
	if r := hc.GetReuseConnection(); r != nil && !r.GetValue() {
		return out, p.field("reuse_connection").errorf("false not supported (meshlet reuses health-check connections)")
	}
	c := &out.HealthCheckConfig
	var err error
	if c.Timeout, err = requiredDuration(p.field("timeout"), hc.GetTimeout()); err != nil {
		return out, err
	}
	if c.Interval, err = requiredDuration(p.field("interval"), hc.GetInterval()); err != nil {
		return out, err
	}
	optional := []struct {
		name string
		src  *durationpb.Duration
		dst  *time.Duration
	}{
		{"initial_jitter", hc.GetInitialJitter(), &c.InitialJitter},
		{"interval_jitter", hc.GetIntervalJitter(), &c.IntervalJitter},
		{"no_traffic_interval", hc.GetNoTrafficInterval(), &c.NoTrafficInterval},
		{"no_traffic_healthy_interval", hc.GetNoTrafficHealthyInterval(), &c.NoTrafficHealthyInterval},
		{"unhealthy_interval", hc.GetUnhealthyInterval(), &c.UnhealthyInterval},
		{"unhealthy_edge_interval", hc.GetUnhealthyEdgeInterval(), &c.UnhealthyEdgeInterval},
		{"healthy_edge_interval", hc.GetHealthyEdgeInterval(), &c.HealthyEdgeInterval},
	}
	for _, f := range optional {
		if *f.dst, err = optDuration(p.field(f.name), f.src, 0); err != nil {
			return out, err
		}
	}
	c.IntervalJitterPercent = hc.GetIntervalJitterPercent()
	if hc.GetUnhealthyThreshold() == nil {
		return out, p.field("unhealthy_threshold").errorf("required")
	}
	if hc.GetHealthyThreshold() == nil {
		return out, p.field("healthy_threshold").errorf("required")
	}
	c.UnhealthyThreshold = hc.GetUnhealthyThreshold().GetValue()
	c.HealthyThreshold = hc.GetHealthyThreshold().GetValue()
	*c = c.WithDefaults()

	switch v := hc.GetHealthChecker().(type) {
	case *corev3.HealthCheck_HttpHealthCheck_:
		err = translateHTTPCheck(p.field("http_health_check"), v.HttpHealthCheck, cluster, &out)
	case *corev3.HealthCheck_TcpHealthCheck_:
		err = translateTCPCheck(p.field("tcp_health_check"), v.TcpHealthCheck, &out)
	case *corev3.HealthCheck_GrpcHealthCheck_:
		out.Kind = config.HealthCheckGRPC
		err = rejectUnsupported(p.field("grpc_health_check"), v.GrpcHealthCheck, "service_name")
		out.GRPCService = v.GrpcHealthCheck.GetServiceName()
	default:
		err = p.errorf("one of http_health_check, tcp_health_check or grpc_health_check is required")
	}
	if err != nil {
		return out, err
	}
	if err := out.Validate(); err != nil {
		return out, p.wrap(lbError(err))
	}
	return out, nil
}

// requiredDuration is positiveDuration for a field that must be set.
func requiredDuration(p path, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, p.errorf("required")
	}
	return positiveDuration(p, d)
}

// translateHTTPCheck reads http_health_check: a GET of path over HTTP/1.1,
// healthy when the status is in expected_statuses (default [200, 201)).
func translateHTTPCheck(p path, h *corev3.HealthCheck_HttpHealthCheck, cluster string, out *config.HealthCheck) error {
	if err := rejectUnsupported(p, h, "host", "path", "expected_statuses", "method", "codec_client_type"); err != nil {
		return err
	}
	if m := h.GetMethod(); m != corev3.RequestMethod_METHOD_UNSPECIFIED && m != corev3.RequestMethod_GET {
		return p.field("method").errorf("%s not supported (want GET)", m)
	}
	if cc := h.GetCodecClientType(); cc != typev3.CodecClientType_HTTP1 {
		return p.field("codec_client_type").errorf("%s not supported (want HTTP1)", cc)
	}
	if h.GetPath() == "" {
		return p.field("path").errorf("required")
	}
	out.Kind, out.Path, out.Host = config.HealthCheckHTTP, h.GetPath(), h.GetHost()
	if out.Host == "" {
		out.Host = cluster
	}
	for i, r := range h.GetExpectedStatuses() {
		rp := p.field("expected_statuses").index(i)
		if err := rejectUnsupported(rp, r, "start", "end"); err != nil {
			return err
		}
		switch {
		case r.GetStart() < 100 || r.GetStart() >= 600:
			return rp.field("start").errorf("%d not in [100, 600)", r.GetStart())
		case r.GetEnd() <= r.GetStart() || r.GetEnd() > 600:
			return rp.field("end").errorf("%d not in (start %d, 600]", r.GetEnd(), r.GetStart())
		}
		out.ExpectedStatuses = append(out.ExpectedStatuses, [2]uint32{uint32(r.GetStart()), uint32(r.GetEnd())})
	}
	if len(out.ExpectedStatuses) == 0 {
		out.ExpectedStatuses = [][2]uint32{{200, 201}}
	}
	return nil
}

// translateTCPCheck reads tcp_health_check: connect, optionally send a
// payload and expect one in return.
func translateTCPCheck(p path, t *corev3.HealthCheck_TcpHealthCheck, out *config.HealthCheck) error {
	if err := rejectUnsupported(p, t, "send", "receive"); err != nil {
		return err
	}
	out.Kind = config.HealthCheckTCP
	var err error
	if t.GetSend() != nil {
		if out.Send, err = payload(p.field("send"), t.GetSend()); err != nil {
			return err
		}
	}
	switch rs := t.GetReceive(); len(rs) {
	case 0:
	case 1:
		out.Receive, err = payload(p.field("receive").index(0), rs[0])
	default:
		// Envoy matches several blocks in order but not contiguously;
		// config.HealthCheck holds one expected block.
		err = p.field("receive").errorf("%d blocks; meshlet matches one", len(rs))
	}
	return err
}

// payload decodes a Payload: text is hex-encoded (Envoy's convention),
// binary is raw bytes (base64 in JSON).
func payload(p path, pl *corev3.HealthCheck_Payload) ([]byte, error) {
	switch v := pl.GetPayload().(type) {
	case *corev3.HealthCheck_Payload_Text:
		b, err := hex.DecodeString(v.Text)
		if err != nil {
			return nil, p.field("text").errorf("%q is not hex: %v", v.Text, err)
		}
		return b, nil
	case *corev3.HealthCheck_Payload_Binary:
		return v.Binary, nil
	}
	return nil, p.errorf("one of text or binary is required")
}
