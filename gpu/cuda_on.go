//go:build cuda

package gpu

import (
	"context"
	"fmt"
	"os"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla" // the "xla" GoMLX backend (cgo; the PJRT plugin is opened at run time)
)

const cudaCompiled = true

// newCUDA loads the CUDA PJRT plugin into GoMLX's XLA backend. It never downloads plugins,
// and it turns off go-xla's CUDA checks, which otherwise point XLA at a hard-coded folder.
func newCUDA(ctx context.Context, opts Options) (be backends.Backend, err error) {
	plugin, err := FindPlugin(ctx, opts.Plugin)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCUDAUnavailable, err)
	}
	xla.EnableAutoInstall(false)
	setDefaultEnv("GOMLX_NO_AUTO_INSTALL", "1")
	setDefaultEnv("GOPJRT_CUDA_CHECKS", "0")
	defer func() {
		// Loading a broken plugin can panic inside go-xla.
		if r := recover(); r != nil {
			be, err = nil, fmt.Errorf("%w: loading PJRT plugin %s panicked: %v", ErrCUDAUnavailable, plugin, r)
		}
	}()
	be, err = xla.New(plugin)
	if err != nil {
		return nil, fmt.Errorf("%w: loading PJRT plugin %s: %w (if CUDA libraries are missing, put the pip nvidia/*/lib folders on LD_LIBRARY_PATH)",
			ErrCUDAUnavailable, plugin, err)
	}
	if be.NumDevices() == 0 {
		be.Finalize()
		return nil, fmt.Errorf("%w: PJRT plugin %s loaded but sees no GPU", ErrCUDAUnavailable, plugin)
	}
	return be, nil
}

// setDefaultEnv sets an environment variable unless the user already did.
func setDefaultEnv(key, value string) {
	if _, ok := os.LookupEnv(key); !ok {
		_ = os.Setenv(key, value)
	}
}
