//go:build !cuda

package gpu

import (
	"context"
	"fmt"

	"github.com/gomlx/gomlx/backends"
)

// cudaCompiled is false: build with -tags cuda (and cgo) for the XLA/CUDA backend.
const cudaCompiled = false

func newCUDA(context.Context, Options) (backends.Backend, error) {
	return nil, fmt.Errorf("%w: this binary was built without CUDA support; build it with `make build-cuda` "+
		"(CGO_ENABLED=1 go build -tags cuda ./cmd/dcl) and run that on a machine with an NVIDIA GPU", ErrCUDAUnavailable)
}
