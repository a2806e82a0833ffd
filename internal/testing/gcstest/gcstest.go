// Package gcstest runs a real GCS emulator (fake-gcs-server, speaking the JSON and XML APIs
// over HTTP) on loopback for tests, and points the storage client at it through
// STORAGE_EMULATOR_HOST, the variable the real client honours. StartFaulty puts a proxy in
// front of it that fails requests on demand (5xx answers, connections dropped mid-request);
// Unreachable and StartLate give an endpoint that refuses connections, for good or for a
// while.
package gcstest

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// Start starts an emulator on a free loopback port with one empty bucket, sets
// STORAGE_EMULATOR_HOST for the rest of the test, and stops the server at the test's end.
// It returns the bucket's root as a gs:// path. Tests that call it cannot run in parallel
// with tests that need another emulator, because the variable is process-wide.
func Start(t testing.TB, bucket string) string {
	t.Helper()
	addr := freeAddr(t)
	if _, err := startOn(t, addr, addr, bucket); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STORAGE_EMULATOR_HOST", addr)
	return "gs://" + bucket
}

// startOn starts an emulator listening on addr that takes publicHost for its own name
// (without it the XML API's reads return 404).
func startOn(t testing.TB, addr, publicHost, bucket string) (*fakestorage.Server, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var p uint16
	fmt.Sscan(port, &p)
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme: "http", Host: host, Port: p, PublicHost: publicHost,
	})
	if err != nil {
		return nil, fmt.Errorf("starting the GCS emulator on %s: %w", addr, err)
	}
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	return srv, nil
}

// Unreachable points STORAGE_EMULATOR_HOST at a loopback port where nothing listens, so
// every connection is refused, and returns a gs:// root there and the endpoint.
func Unreachable(t testing.TB, bucket string) (root, endpoint string) {
	t.Helper()
	addr := freeAddr(t)
	t.Setenv("STORAGE_EMULATOR_HOST", addr)
	return "gs://" + bucket, addr
}

// StartLate is Start with an emulator that begins listening only after delay: until then
// its port refuses connections, as a restarting server's does.
func StartLate(t testing.TB, bucket string, delay time.Duration) string {
	t.Helper()
	addr := freeAddr(t)
	t.Setenv("STORAGE_EMULATOR_HOST", addr)
	started := make(chan struct{})
	timer := time.AfterFunc(delay, func() {
		defer close(started)
		if _, err := startOn(t, addr, addr, bucket); err != nil {
			t.Error(err) // not Fatal: this is not the test's goroutine
		}
	})
	t.Cleanup(func() {
		if timer.Stop() {
			return
		}
		<-started
	})
	return "gs://" + bucket
}

// Fault is one misbehaviour of the proxy: an HTTP status instead of the emulator's answer,
// or, with Drop, a connection closed after reading part of the request's body (half of an
// upload), with no answer.
type Fault struct {
	Status int
	Drop   bool
	// Match limits the fault to the requests it accepts (nil: any request).
	Match func(*http.Request) bool
}

// Uploads matches the requests that carry an object's bytes.
func Uploads(r *http.Request) bool {
	return r.Method == http.MethodPost || r.Method == http.MethodPut
}

// Faults is the queue of faults of a StartFaulty proxy: each request takes the first queued
// fault that matches it, if any, and is otherwise passed to the emulator.
type Faults struct {
	mu       sync.Mutex
	queue    []Fault
	injected int
	requests int
}

// Inject queues faults, in order.
func (f *Faults) Inject(faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, faults...)
}

// Clear drops the faults not yet used.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = nil
}

// Injected returns how many faults requests have met so far; Requests, how many requests
// reached the proxy.
func (f *Faults) Injected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected
}

// Requests returns how many requests reached the proxy.
func (f *Faults) Requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

func (f *Faults) next(r *http.Request) (Fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	for i, ft := range f.queue {
		if ft.Match == nil || ft.Match(r) {
			f.queue = append(f.queue[:i], f.queue[i+1:]...)
			f.injected++
			return ft, true
		}
	}
	return Fault{}, false
}

// StartFaulty is Start behind a proxy whose faults the test injects. The emulator itself is
// returned too, for looking at what it holds without going through the faults.
func StartFaulty(t testing.TB, bucket string) (root string, faults *Faults, srv *fakestorage.Server) {
	t.Helper()
	proxyAddr, emuAddr := freeAddr(t), freeAddr(t)
	srv, err := startOn(t, emuAddr, proxyAddr, bucket)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse("http://" + emuAddr)
	if err != nil {
		t.Fatal(err)
	}
	faults = &Faults{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0) // a client that gives up is what the tests cause
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ft, ok := faults.next(r)
		switch {
		case !ok:
			rp.ServeHTTP(w, r)
		case ft.Drop:
			dropMidRequest(w, r)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(ft.Status)
			fmt.Fprintf(w, `{"error":{"code":%d,"message":"injected fault"}}`, ft.Status)
		}
	})
	l, err := net.Listen("tcp", proxyAddr)
	if err != nil {
		t.Fatalf("listening on %s for the faulty proxy: %v", proxyAddr, err)
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	t.Setenv("STORAGE_EMULATOR_HOST", proxyAddr)
	return "gs://" + bucket, faults, srv
}

// dropMidRequest reads half of the request's body (or none, for a bodiless request) and
// closes the connection without answering.
func dropMidRequest(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > 0 {
		io.CopyN(io.Discard, r.Body, r.ContentLength/2)
	} else if r.Body != nil && !strings.EqualFold(r.Method, http.MethodGet) {
		io.CopyN(io.Discard, r.Body, 1<<10)
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("gcstest: the proxy's connection cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // a reset, as a dropped connection looks to the client
	}
	conn.Close()
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port for the GCS emulator: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
