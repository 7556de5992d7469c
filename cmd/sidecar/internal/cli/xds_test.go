package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshlet-dev/meshlet/discovery/xds"
)

// `sidecar run -xds`: the real control-plane ADS server (fed a Service and
// its EndpointSlice, as its informers will) delivers the cluster and its
// route to the real sidecar; readiness waits for that first configuration;
// a request to the Service IP (static original destination here) reaches
// the endpoint; an endpoint change arrives as a reload.
func TestRunWithXDS(t *testing.T) {
	upA := upstreamOn(t, "127.0.0.41:0", "a")
	_, p, _ := net.SplitHostPort(upA)
	upB := upstreamOn(t, "127.0.0.42:"+p, "b") // an EndpointSlice has one port for all its endpoints
	cp := xds.NewServer(xds.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	port := func(addr string) int32 { _, p, _ := net.SplitHostPort(addr); n, _ := strconv.Atoi(p); return int32(n) }
	setSlice := func(addrs ...string) {
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: ptrTo(port(upA)), Protocol: ptrTo(corev1.ProtocolTCP)}}}
		for _, a := range addrs {
			h, _, _ := net.SplitHostPort(a)
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{h}, Zone: ptrTo("a"),
				Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true), Serving: ptrTo(true), Terminating: ptrTo(false)}})
		}
		cp.UpsertEndpointSlice(es)
	}
	cp.UpsertService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.7.7", ClusterIPs: []string{"10.96.7.7"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(port(upA))}}}})
	setSlice(upA)
	cp.SetSynced()
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	g := grpc.NewServer()
	cp.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cp.Run(ctx)
	go g.Serve(gl)
	defer g.Stop()

	free := func() string { l, _ := net.Listen("tcp", "127.0.0.1:0"); defer l.Close(); return l.Addr().String() }
	listen, admin := free(), free()
	path := filepath.Join(t.TempDir(), "sidecar.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`node: {id: sidecar-1, cluster: client, locality: {region: r1, zone: a}}
admin: %s
health: "off"
prometheus: "off"
access_log: {path: "off"}
listeners:
  - address: %s
    original_destination: 10.96.7.7:80
clusters: []
`, admin, listen)), 0o644)
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() {
		done <- run([]string{"-config", path, "-xds", gl.Addr().String(), "-watch", "0", "-log-level", "error"}, &out)
	}()
	waitReady := func() bool {
		resp, err := http.Get("http://" + admin + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	for deadline := time.Now().Add(30 * time.Second); !waitReady(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sidecar never ready:\n%s", out.String())
		}
	}
	body := func() string {
		resp, err := http.Get("http://" + listen + "/")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := body(); got != "a" {
		t.Fatalf("through the xDS route: %q, want endpoint a", got)
	}
	setSlice(upB) // the endpoint moves
	for deadline := time.Now().Add(30 * time.Second); body() != "b"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("endpoint change never arrived: %q", body())
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func upstreamOn(t *testing.T, addr, name string) string {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

func ptrTo[T any](v T) *T { return &v }
