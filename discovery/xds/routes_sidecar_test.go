package xds

import (
	"strings"
	"testing"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestRouteValuesAsTheSidecarReadsThem: a header value's percent sign
// goes as Envoy's format strings write it (%%), and a regular expression
// over the sidecar's program size limit is refused here, with its rule,
// rather than sent for every sidecar to refuse.
func TestRouteValuesAsTheSidecarReadsThem(t *testing.T) {
	pct := rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/pct")}, to("", "v1", 80, nil))
	pct.Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier,
		RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "X-Share", Value: "50%"}}}}}
	huge := rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchRegularExpression, strings.Repeat("(?:.*a)", 100)+"b")}, to("", "v1", 80, nil))
	s := routeServer(t, shop(), httpRoute("shop", "v", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)}, pct, huge))
	rs := routesOf(t, onlyRC(t, s, "c.other", echo80))
	eq(t, routeNames(rs), []string{"shop/v/0"})
	eq(t, rs[0].GetRequestHeadersToAdd()[0].GetHeader().GetValue(), "50%%")
}
