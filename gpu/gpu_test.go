package gpu

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/gpu/cpu"
	"github.com/dcl-beam/dcl-beam/gpu/cuda"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestParseKind(t *testing.T) {
	for _, c := range []struct {
		give string
		want Kind
		err  bool
	}{{"cpu", CPU, false}, {"CUDA", CUDA, false}, {" auto ", Auto, false}, {"", Auto, false}, {"tpu", "", true}} {
		got, err := ParseKind(c.give)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseKind(%q) = %q, %v; want %q, error %v", c.give, got, err, c.want, c.err)
		}
	}
}

func TestNewCPU(t *testing.T) {
	be, err := New(context.Background(), Options{Kind: CPU, Threads: 1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Finalize()
	if be.Name() != cpu.BackendName {
		t.Fatalf("backend %q, want %q", be.Name(), cpu.BackendName)
	}
}

// TestNewCUDAWithoutIt checks that asking for CUDA where it cannot work fails with a message
// that says what is missing, and that auto falls back to the CPU.
func TestNewCUDAWithoutIt(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.so")
	_, err := New(context.Background(), Options{Kind: CUDA, Plugin: missing, Logger: quietLogger()})
	if !errors.Is(err, ErrCUDAUnavailable) && cuda.Compiled {
		t.Fatalf("error %v does not wrap ErrCUDAUnavailable", err)
	}
	if err == nil {
		t.Fatal("no error for CUDA with a missing plugin")
	}
	if !cuda.Compiled && !strings.Contains(err.Error(), "-tags cuda") {
		t.Errorf("error %q does not say how to build with CUDA", err)
	}
	if cuda.Compiled && !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q does not name the missing plugin", err)
	}
	be, err := New(context.Background(), Options{Kind: Auto, Plugin: missing, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Finalize()
	if be.Name() != cpu.BackendName {
		t.Fatalf("auto without CUDA chose %q, want the CPU", be.Name())
	}
}
