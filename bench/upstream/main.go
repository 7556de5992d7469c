// Command upstream is the benchmark's backend: an HTTP/1.1 keep-alive server
// that answers every request with the same 1 KiB body (with Content-Length).
//
//	go run ./bench/upstream -addr 127.0.0.1:18080
package main

import (
	"bytes"
	"flag"
	"log"
	"net/http"
	"strconv"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18080", "listen address")
	size := flag.Int("size", 1024, "response body size in bytes")
	echoID := flag.Bool("echo-request-id", false, "answer a request's X-Request-Id as X-Echo-Id (bench/pairsplit.py follows requests by it)")
	flag.Parse()

	body := bytes.Repeat([]byte("x"), *size)
	length := strconv.Itoa(len(body))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr["Content-Type"] = []string{"text/plain"}
		hdr["Content-Length"] = []string{length}
		if id := r.Header["X-Request-Id"]; *echoID && len(id) == 1 {
			hdr["X-Echo-Id"] = id
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
	srv := &http.Server{
		Addr:              *addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
	}
	log.Printf("upstream: listening on %s, %d-byte body", *addr, len(body))
	log.Fatal(srv.ListenAndServe())
}
