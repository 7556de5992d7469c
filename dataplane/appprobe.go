package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// AppProber is one of the app's original Kubernetes probes, which the
// injector rewrote to the sidecar's health port (/app-health/<container>/
// <kind>) so the kubelet's plaintext probes do not meet STRICT mTLS. The
// JSON shape is the Kubernetes probe handler's (httpGet, tcpSocket, grpc).
type AppProber struct {
	HTTPGet *struct {
		Path        string `json:"path"`
		Port        int    `json:"port"`
		Host        string `json:"host"`
		Scheme      string `json:"scheme"`
		HTTPHeaders []struct {
			Name, Value string
		} `json:"httpHeaders"`
	} `json:"httpGet,omitempty"`
	TCPSocket *struct {
		Port int `json:"port"`
	} `json:"tcpSocket,omitempty"`
	GRPC *struct {
		Port    int     `json:"port"`
		Service *string `json:"service"`
	} `json:"grpc,omitempty"`
	TimeoutSeconds int `json:"timeoutSeconds"`
}

// ParseAppProbers reads the injector's MESHLET_APP_PROBERS value
// (path -> prober); every path must start with /app-health/.
func ParseAppProbers(s string) (map[string]AppProber, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var m map[string]AppProber
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("dataplane: app probers: %w", err)
	}
	for path, p := range m {
		n := 0
		for _, set := range []bool{p.HTTPGet != nil, p.TCPSocket != nil, p.GRPC != nil} {
			if set {
				n++
			}
		}
		switch {
		case !strings.HasPrefix(path, "/app-health/"):
			return nil, fmt.Errorf("dataplane: app probers: path %q must start with /app-health/", path)
		case n != 1:
			return nil, fmt.Errorf("dataplane: app probers: %q: want exactly one of httpGet, tcpSocket, grpc", path)
		}
	}
	return m, nil
}

// appHealth runs the app probe registered for the request path against the
// app on loopback: 200 when it passes, 503 with the reason when it fails.
func (s *Server) appHealth(w http.ResponseWriter, r *http.Request) {
	p, ok := s.opts.AppProbers[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	if err := runAppProbe(ctx, p); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func runAppProbe(ctx context.Context, p AppProber) error {
	switch {
	case p.HTTPGet != nil:
		g := p.HTTPGet
		scheme := "http"
		if strings.EqualFold(g.Scheme, "https") {
			scheme = "https"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(g.Port))+g.Path, nil)
		if err != nil {
			return err
		}
		if g.Host != "" {
			req.Host = g.Host
		}
		for _, h := range g.HTTPHeaders {
			if strings.EqualFold(h.Name, "Host") {
				req.Host = h.Value
				continue
			}
			req.Header.Add(h.Name, h.Value)
		}
		req.Header.Set("User-Agent", "kube-probe (via meshlet)")
		resp, err := appProbeClient.Do(req)
		if err != nil {
			return fmt.Errorf("app probe: %w", err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
		resp.Body.Close()
		// The kubelet's rule: 200 <= status < 400 succeeds.
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("app probe: HTTP %d", resp.StatusCode)
		}
		return nil
	case p.TCPSocket != nil:
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.TCPSocket.Port)))
		if err != nil {
			return fmt.Errorf("app probe: %w", err)
		}
		return c.Close()
	case p.GRPC != nil:
		conn, err := grpc.NewClient(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.GRPC.Port)), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("app probe: %w", err)
		}
		defer conn.Close()
		svc := ""
		if p.GRPC.Service != nil {
			svc = *p.GRPC.Service
		}
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			return fmt.Errorf("app probe: %w", err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("app probe: gRPC health %s", resp.GetStatus())
		}
		return nil
	}
	return fmt.Errorf("app probe: no handler")
}

// appProbeClient never follows redirects (the kubelet counts a 3xx as
// success) and never reuses connections across probes.
var appProbeClient = &http.Client{
	Transport:     &http.Transport{DisableKeepAlives: true},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}
