package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// drain marks the instance not ready at once, keeps every server answering
// until the wait is over, then stops them all, each finishing its request
// in flight. The wait is a channel the test closes: no sleeps.
func TestDrain_NotReadyFirstThenServersStopAfterTheirRequestsFinish(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, _ *http.Request) {
		started <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "done")
	})
	mux.HandleFunc("/fast", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	// Two servers, as quotad has with its gRPC server: both must drain.
	var servers []stopper
	var urls []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := &fasthttp.Server{Handler: fasthttpadaptor.NewFastHTTPHandler(mux), CloseOnShutdown: true}
		go func() { _ = hs.Serve(ln) }()
		servers = append(servers, httpStopper(hs))
		urls = append(urls, "http://"+ln.Addr().String())
	}
	slow := make(chan int, len(urls))
	for _, u := range urls {
		go func() {
			resp, err := http.Get(u + "/slow")
			if err != nil {
				slow <- 0
				return
			}
			resp.Body.Close()
			slow <- resp.StatusCode
		}()
		<-started
	}

	var notReady atomic.Bool
	waited := make(chan struct{})
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { done <- drain(log, func() { notReady.Store(true) }, waited, 5*time.Second, servers...) }()

	deadline := time.Now().Add(5 * time.Second)
	for !notReady.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !notReady.Load() {
		t.Fatal("drain did not mark the instance not ready")
	}
	// During the wait every server still takes new requests.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	for _, u := range urls {
		resp, err := client.Get(u + "/fast")
		if err != nil {
			t.Fatalf("a new request during the drain wait: %v", err)
		}
		resp.Body.Close()
	}
	select {
	case err := <-done:
		t.Fatalf("drain returned before its wait was over: %v", err)
	default:
	}

	close(waited)
	// The servers stop accepting, but wait for the requests in flight.
	for _, u := range urls {
		deadline := time.Now().Add(5 * time.Second)
		for {
			resp, err := client.Get(u + "/fast")
			if err != nil {
				break
			}
			resp.Body.Close()
			if time.Now().After(deadline) {
				t.Fatalf("%s still accepts new requests after the wait", u)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("drain returned with requests in flight: %v", err)
	default:
	}
	close(release)
	for range urls {
		if code := <-slow; code != http.StatusOK {
			t.Fatalf("a request in flight when the drain began: %d, want 200", code)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("drain did not return once the requests in flight were done")
	}
}

// A server that cannot finish within the grace period makes drain return
// an error naming it rather than hang.
func TestDrain_GivesUpAfterTheGracePeriod(t *testing.T) {
	t.Parallel()
	waited := make(chan struct{})
	close(waited)
	stuck := stopper{name: "grpc", stop: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := drain(log, func() {}, waited, 50*time.Millisecond, stuck)
	if err == nil || !strings.Contains(err.Error(), "shutdown grpc") {
		t.Fatalf("drain of a server that does not stop: %v", err)
	}
}
