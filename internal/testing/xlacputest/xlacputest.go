// Package xlacputest gives tests the xla-cpu backend: XLA's CPU PJRT plugin, which `make deps`
// installs, loaded through the project's XLA code (gpu.New with gpu.XLACPU). Where the plugin
// is missing the tests skip with one line saying so; where `make deps` ran, none skips.
package xlacputest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/gomlx/compute"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/gpu/cuda"
)

// Require skips t, saying why, unless this binary has the XLA backend and XLA's CPU plugin
// is installed.
func Require(t testing.TB) {
	t.Helper()
	if !cuda.Compiled {
		t.Skip("xla-cpu: built without the cuda tag (make test runs these tests with -tags cuda)")
	}
	if _, err := cuda.DefaultEnv().FindCPUPlugin(""); err != nil {
		t.Skipf("xla-cpu: %v", err)
	}
}

// Backend returns an xla-cpu backend, released when the test ends; it skips t as Require does.
func Backend(t testing.TB, opts gpu.Options) compute.Backend {
	t.Helper()
	Require(t)
	opts.Kind = gpu.XLACPU
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	be, err := gpu.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Finalize)
	return be
}
