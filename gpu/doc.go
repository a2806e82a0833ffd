// Package gpu chooses and configures the compute backend under the tensor engine: the
// pure-Go CPU backend, available in every build including CGO_ENABLED=0 Beam workers, and
// CUDA through XLA/PJRT, compiled in only with the "cuda" build tag because it needs cgo.
// It also owns device discovery and precision settings.
package gpu
