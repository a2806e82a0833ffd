//go:build !cuda

package cuda

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomlx/compute"
)

// Compiled is false: build with -tags cuda (and cgo) for the XLA/CUDA backend.
const Compiled = false

// Options configure Load.
type Options struct {
	// Plugin is the plugin's path; empty means FindPlugin's search.
	Plugin string
	// TF32 lets float32 convolutions and matrix products use TF32 tensor cores.
	TF32 bool
	// ConvDefaultPrecision leaves convolutions at XLA's DEFAULT precision (the GPU check's
	// measurement of dcl-beam's go-xla patch).
	ConvDefaultPrecision bool
	// Env is the machine to search; nil means DefaultEnv().
	Env *Env
}

// ErrUnavailable is wrapped by every Load error.
var ErrUnavailable = errors.New("CUDA backend unavailable")

// Load fails: this binary has no XLA backend.
func Load(context.Context, Options) (compute.Backend, error) {
	return nil, fmt.Errorf("%w: this binary was built without CUDA support; build it with `make build-cuda` "+
		"(CGO_ENABLED=1 go build -tags cuda ./cmd/dcl) and run that on a machine with an NVIDIA GPU", ErrUnavailable)
}

func probe(context.Context, Env, string, []string, string) LoadResult {
	return LoadResult{GoXLAPJRT: GoXLAPJRTVersion, Error: "not compiled in"}
}

func driverCUDA() int { return 0 }

// LoadCPU fails: this binary has no XLA backend.
func LoadCPU(context.Context, CPUOptions) (compute.Backend, error) {
	return nil, fmt.Errorf("%w: this binary was built without the XLA backend; build it with `make build-cuda` "+
		"(CGO_ENABLED=1 go build -tags cuda ./cmd/dcl)", ErrCPUPluginUnavailable)
}

func probeCPU(context.Context, string) LoadResult {
	return LoadResult{GoXLAPJRT: GoXLAPJRTVersion, Error: "not compiled in"}
}

// IsXLACPU is false: this binary has no XLA backend.
func IsXLACPU(compute.Backend) bool { return false }

// RecordPrograms fails: this binary has no XLA backend.
func RecordPrograms(be compute.Backend) (*ProgramLog, error) {
	return nil, fmt.Errorf("backend %s is not XLA: it compiles no StableHLO", be.Name())
}

// DeviceMemory fails: this binary has no XLA backend.
func DeviceMemory(be compute.Backend) (MemoryStats, error) {
	return MemoryStats{}, fmt.Errorf("backend %s keeps no device allocator statistics", be.Name())
}
