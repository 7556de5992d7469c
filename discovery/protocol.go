package discovery

import (
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshlet-dev/meshlet/config"
)

// httpProtocolOptionsKey is the typed_extension_protocol_options key of the
// upstream HTTP options (the extension's type name, which Envoy accepts).
const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// translateUpstreamProtocol reads how the cluster speaks HTTP upstream:
// typed_extension_protocol_options[httpProtocolOptionsKey], or the
// deprecated cluster-level fields (not both, as in Envoy). HTTP/1.1 and
// config.DefaultUpstreamIdleTimeout unless configured; an explicit
// idle_timeout of 0 disables the idle timeout, as in Envoy.
func translateUpstreamProtocol(root path, c *clusterv3.Cluster, out *config.Cluster) error {
	tp := root.field("typed_extension_protocol_options")
	opts := c.GetTypedExtensionProtocolOptions()
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k != httpProtocolOptionsKey {
			return tp.key(k).errorf("not supported by meshlet (want %s)", httpProtocolOptionsKey)
		}
	}
	legacy := ""
	r := c.ProtoReflect()
	for _, f := range []protoreflect.Name{"max_requests_per_connection", "common_http_protocol_options", "http_protocol_options", "http2_protocol_options"} {
		if r.Has(r.Descriptor().Fields().ByName(f)) {
			legacy = string(f)
			break
		}
	}
	if a, ok := opts[httpProtocolOptionsKey]; ok {
		p := tp.key(httpProtocolOptionsKey)
		if legacy != "" {
			return root.field(legacy).errorf("deprecated field cannot be combined with typed_extension_protocol_options")
		}
		var hpo httpv3.HttpProtocolOptions
		if err := a.UnmarshalTo(&hpo); err != nil {
			return p.field("@type").errorf("%s: want type.googleapis.com/%s", a.GetTypeUrl(), httpProtocolOptionsKey)
		}
		if err := translateHTTPOptions(p, &hpo, out); err != nil {
			return err
		}
		return validateProto(p, &hpo)
	}
	return translateLegacyHTTP(root, c, out)
}

// translateHTTPOptions reads an HttpProtocolOptions extension config.
func translateHTTPOptions(p path, h *httpv3.HttpProtocolOptions, out *config.Cluster) error {
	if err := rejectUnsupported(p, h, "common_http_protocol_options", "explicit_http_config"); err != nil {
		return err
	}
	if ch := h.GetCommonHttpProtocolOptions(); ch != nil {
		if err := translateCommonHTTP(p.field("common_http_protocol_options"), ch, out); err != nil {
			return err
		}
	}
	ep := p.field("explicit_http_config")
	switch v := h.GetUpstreamProtocolOptions().(type) {
	case *httpv3.HttpProtocolOptions_ExplicitHttpConfig_:
		if err := rejectUnsupported(ep, v.ExplicitHttpConfig, "http_protocol_options", "http2_protocol_options"); err != nil {
			return err
		}
		switch pc := v.ExplicitHttpConfig.GetProtocolConfig().(type) {
		case *httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions:
			out.Protocol = config.UpstreamHTTP1
			return rejectUnsupported(ep.field("http_protocol_options"), pc.HttpProtocolOptions)
		case *httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions:
			out.Protocol = config.UpstreamHTTP2
			return rejectUnsupported(ep.field("http2_protocol_options"), pc.Http2ProtocolOptions)
		}
		return ep.errorf("one of http_protocol_options or http2_protocol_options is required")
	}
	return nil
}

// translateLegacyHTTP reads the deprecated cluster-level protocol fields.
func translateLegacyHTTP(root path, c *clusterv3.Cluster, out *config.Cluster) error {
	if c.GetHttpProtocolOptions() != nil && c.GetHttp2ProtocolOptions() != nil {
		return root.field("http2_protocol_options").errorf("cannot be combined with http_protocol_options")
	}
	if h1 := c.GetHttpProtocolOptions(); h1 != nil {
		if err := rejectUnsupported(root.field("http_protocol_options"), h1); err != nil {
			return err
		}
	}
	if h2 := c.GetHttp2ProtocolOptions(); h2 != nil {
		if err := rejectUnsupported(root.field("http2_protocol_options"), h2); err != nil {
			return err
		}
		out.Protocol = config.UpstreamHTTP2
	}
	if ch := c.GetCommonHttpProtocolOptions(); ch != nil {
		if err := translateCommonHTTP(root.field("common_http_protocol_options"), ch, out); err != nil {
			return err
		}
	}
	if m := c.GetMaxRequestsPerConnection(); m != nil {
		if c.GetCommonHttpProtocolOptions().GetMaxRequestsPerConnection() != nil {
			return root.field("max_requests_per_connection").errorf("cannot be combined with common_http_protocol_options.max_requests_per_connection")
		}
		out.MaxRequestsPerConnection = m.GetValue()
	}
	return nil
}

// translateCommonHTTP reads the idle timeout and the request limit of a
// core.HttpProtocolOptions.
func translateCommonHTTP(p path, h *corev3.HttpProtocolOptions, out *config.Cluster) error {
	if err := rejectUnsupported(p, h, "idle_timeout", "max_requests_per_connection"); err != nil {
		return err
	}
	var err error
	if out.IdleTimeout, err = optDuration(p.field("idle_timeout"), h.GetIdleTimeout(), out.IdleTimeout); err != nil {
		return err
	}
	out.MaxRequestsPerConnection = u32(h.GetMaxRequestsPerConnection(), out.MaxRequestsPerConnection)
	return nil
}
