package trainstep

import (
	"encoding/json"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
)

// newTestBackend returns a pure-Go backend, released when the test ends.
func newTestBackend(t testing.TB) backends.Backend {
	t.Helper()
	b, err := simplego.New("")
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
