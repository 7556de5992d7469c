// Command echo is the e2e nodes' app image: an HTTP server on $LISTEN that
// answers "pod=$POD_NAME zone=$ZONE from=<peer> sidecar_ready_at_start=<bool>"
// (and /healthz), the last field saying whether the pod's sidecar answered
// its readiness check on 127.0.0.1:15021 when the app started; and, with
// $TARGETS (comma-separated URLs), a client that GETs each target once a
// second on a new connection and serves the last results as JSON on
// /peers; with $COUNT too, it exits after that many rounds, with status 0
// if every GET answered 200 (a Job's app). /fetch?url=U&n=N&header=K:V
// sends N GETs (or &method=M requests) of U from the pod (through its
// sidecar), with the given headers, and answers their results as JSON, for tests that need many
// requests at once (a traffic split) or headers of their own (a route's
// match). Built statically and packed into docker.io/local/echo:v1 by the
// real-nodes tests. /headers answers the request's headers as JSON.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// result is one GET of a target.
type result struct {
	Target string `json:"target"`
	Code   int    `json:"code"`
	Body   string `json:"body,omitempty"`
	Error  string `json:"error,omitempty"`
	Time   string `json:"time"`
}

func main() {
	// Was the sidecar ready before the app started (the native sidecar's
	// promise)? Asked once, at once.
	sidecarReady := false
	if resp, err := (&http.Client{Timeout: time.Second}).Get("http://127.0.0.1:15021/healthz/ready"); err == nil {
		sidecarReady = resp.StatusCode == http.StatusOK
		resp.Body.Close()
	}
	log.Printf("sidecar ready at start: %v", sidecarReady)
	listen := os.Getenv("LISTEN")
	if listen == "" {
		listen = ":8080"
	}
	var mu sync.Mutex
	var results []result
	total := map[string]int{}
	if t := os.Getenv("TARGETS"); t != "" {
		client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		count := 0
		fmt.Sscan(os.Getenv("COUNT"), &count)
		go func() {
			rounds, failed := 0, 0
			for range time.Tick(time.Second) {
				if count > 0 && rounds == count {
					log.Printf("%d rounds, %d failed GETs: exiting", rounds, failed)
					if failed > 0 {
						os.Exit(1)
					}
					os.Exit(0)
				}
				rounds++
				for _, url := range strings.Split(t, ",") {
					r := result{Target: url, Time: time.Now().UTC().Format(time.RFC3339Nano)}
					resp, err := client.Get(url)
					if err != nil {
						r.Error = err.Error()
						failed++
					} else {
						b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
						resp.Body.Close()
						r.Code, r.Body = resp.StatusCode, strings.TrimSpace(string(b))
						if r.Code != 200 {
							failed++
						}
					}
					mu.Lock()
					results = append(results, r)
					if len(results) > 200 {
						results = results[len(results)-200:]
					}
					total[fmt.Sprint(r.Code)]++
					mu.Unlock()
				}
			}
		}()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/peers", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"results": results, "codes": total})
	})
	mux.HandleFunc("/fetch", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		n := 1
		fmt.Sscan(q.Get("n"), &n)
		n = min(max(n, 1), 1000)
		client := &http.Client{Timeout: 3 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		out := make([]result, 0, n)
		for range n {
			res := result{Target: q.Get("url"), Time: time.Now().UTC().Format(time.RFC3339Nano)}
			method := q.Get("method")
			if method == "" {
				method = http.MethodGet
			}
			req, err := http.NewRequest(method, q.Get("url"), nil)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, h := range q["header"] {
				k, v, _ := strings.Cut(h, ":")
				req.Header.Add(k, strings.TrimSpace(v))
			}
			resp, err := client.Do(req)
			if err != nil {
				res.Error = err.Error()
			} else {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				resp.Body.Close()
				res.Code, res.Body = resp.StatusCode, strings.TrimSpace(string(b))
			}
			out = append(out, res)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"results": out})
	})
	// /headers: the request's headers as JSON (what the sidecar
	// forwarded: the trace context, say).
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"pod": os.Getenv("POD_NAME"), "headers": r.Header})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "pod=%s zone=%s from=%s sidecar_ready_at_start=%v\n", os.Getenv("POD_NAME"), os.Getenv("ZONE"), r.RemoteAddr, sidecarReady)
	})
	log.Fatal(http.ListenAndServe(listen, mux))
}
