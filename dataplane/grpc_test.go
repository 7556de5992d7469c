package dataplane

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// gRPC (HTTP/2 prior knowledge) through the proxy to an h2c upstream:
// unary with trailers, server streaming, and a gRPC-shaped local reply.
func TestGRPCUnaryAndStreaming(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.11:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("echo", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)

	cl := testCluster("echo", endpoint(l.Addr().String(), "a"))
	cl.Protocol = config.UpstreamHTTP2
	dead := testCluster("dead", endpoint(closedAddr(t, "127.0.0.12"), "a"))
	cfg := testConfig(noRetry, cl, dead)
	cfg.Listeners[0].Routes = append(cfg.Listeners[0].Routes, config.Route{Name: "dead", Hosts: []string{"dead"}, Cluster: "dead", Timeout: time.Second})
	s, logs := startServer(t, cfg)
	addr := strings.TrimPrefix(proxyURL(s), "http://")

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("echo"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client := healthpb.NewHealthClient(conn)
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "echo"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("unary Check: %v %v", resp, err)
	}
	// An application error travels in trailers.
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown service: %v, want NotFound from the upstream's trailers", err)
	}
	// Server streaming: the first status, then a change pushed later.
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Watch message: %v %v", m, err)
	}
	hs.SetServingStatus("echo", healthpb.HealthCheckResponse_NOT_SERVING)
	if m, err := stream.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("streamed update: %v %v", m, err)
	}
	logs.waitLine(t, `"POST /grpc.health.v1.Health/Check HTTP/2.0" 200 - `)

	// A local reply to a gRPC client is a gRPC status, not an HTML page.
	deadConn, _ := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("dead"))
	defer deadConn.Close()
	_, err = healthpb.NewHealthClient(deadConn).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection failure") {
		t.Errorf("dead upstream: %v, want Unavailable with the reset reason", err)
	}
	logs.waitLine(t, `"POST /grpc.health.v1.Health/Check HTTP/2.0" 200 UF `)
	_ = respflag.UF
}
