package trainstep

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/gomlx/compute"

	"github.com/dcl-beam/dcl-beam/gpu"
)

// testBackendKind is the backend newTestBackend makes: the project's CPU backend, or XLA's
// CPU plugin while a TestXLACPU test runs one of the others on it (xlacpu_test.go).
var testBackendKind = gpu.CPU

// newTestBackend returns a backend of testBackendKind, released when the test ends.
func newTestBackend(t testing.TB) compute.Backend {
	t.Helper()
	b, err := gpu.New(context.Background(), gpu.Options{Kind: testBackendKind, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Finalize)
	return b
}

func mustUnmarshal(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("parsing %q: %v", s, err)
	}
}
