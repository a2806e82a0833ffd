// Package gcstest runs a real GCS emulator (fake-gcs-server, speaking the JSON and XML APIs
// over HTTP) on loopback for tests, and points the storage client at it through
// STORAGE_EMULATOR_HOST, the variable the real client honours.
package gcstest

import (
	"fmt"
	"net"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// Start starts an emulator on a free loopback port with one empty bucket, sets
// STORAGE_EMULATOR_HOST for the rest of the test, and stops the server at the test's end.
// It returns the bucket's root as a gs:// path. Tests that call it cannot run in parallel
// with tests that need another emulator, because the variable is process-wide.
func Start(t testing.TB, bucket string) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("finding a free port for the GCS emulator: %v", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme:     "http",
		Host:       "127.0.0.1",
		Port:       uint16(port),
		PublicHost: addr, // without it the XML API reads return 404
	})
	if err != nil {
		t.Fatalf("starting the GCS emulator on %s: %v", addr, err)
	}
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	t.Setenv("STORAGE_EMULATOR_HOST", addr)
	return "gs://" + bucket
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
