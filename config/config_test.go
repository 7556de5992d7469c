package config

import (
	"reflect"
	"testing"
	"time"
)

// WithDefaults resolves every setting a zero value leaves to a default,
// once, on a copy; the timeouts for which 0 means never stay 0.
func TestWithDefaults(t *testing.T) {
	in := &Config{
		Listeners: []Listener{{Name: "l"}},
		Clusters:  []Cluster{{Name: "c"}, {Name: "set", ConnectTimeout: time.Second, IdleTimeout: 2 * time.Second}},
	}
	out := in.WithDefaults()
	if out.AccessLog.Format != AccessLogText || out.AccessLog.FlushInterval != DefaultAccessLogFlushInterval {
		t.Errorf("access log: %+v, want the text format flushed every %v", out.AccessLog, DefaultAccessLogFlushInterval)
	}
	l := out.Listeners[0]
	if l.DetectionTimeout != DefaultDetectionTimeout || l.MaxHeadersCount != DefaultMaxHeadersCount {
		t.Errorf("listener: detection %v, max headers %d", l.DetectionTimeout, l.MaxHeadersCount)
	}
	if l.StreamIdleTimeout != 0 || l.RequestHeadersTimeout != 0 || l.TCPIdleTimeout != 0 {
		t.Errorf("listener: a timeout whose 0 means never was set: %+v", l)
	}
	if c := out.Clusters[0]; c.ConnectTimeout != DefaultConnectTimeout || c.IdleTimeout != DefaultUpstreamIdleTimeout {
		t.Errorf("cluster c: connect %v, idle %v", c.ConnectTimeout, c.IdleTimeout)
	}
	if c := out.Clusters[1]; c.ConnectTimeout != time.Second || c.IdleTimeout != 2*time.Second {
		t.Errorf("cluster set: its own timeouts replaced: connect %v, idle %v", c.ConnectTimeout, c.IdleTimeout)
	}
	if in.AccessLog.Format != "" || in.Listeners[0].DetectionTimeout != 0 || in.Clusters[0].ConnectTimeout != 0 {
		t.Error("WithDefaults changed its input")
	}
	if again := out.WithDefaults(); !reflect.DeepEqual(again, out) {
		t.Error("WithDefaults of a resolved config changed it")
	}
}
