//go:build cuda

package gpu

import (
	_ "github.com/gomlx/gomlx/backends/xla" // registers the "xla" GoMLX backend (cgo, PJRT at run time)
)

const cudaCompiled = true
