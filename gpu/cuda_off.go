//go:build !cuda

package gpu

// cudaCompiled is false: build with -tags cuda (and cgo) for the XLA/CUDA backend.
const cudaCompiled = false
