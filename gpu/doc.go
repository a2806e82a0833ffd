// Package gpu chooses and configures the compute backend under the tensor engine (GoMLX):
// New returns the project's pure-Go CPU backend (package gpu/cpu, available in every build
// including CGO_ENABLED=0 Beam workers), or go-xla's XLA backend on a CUDA PJRT plugin,
// compiled in only with the "cuda" build tag because it needs cgo. Finding, checking and
// loading the plugin is package gpu/cuda's job (cuda.Load; cuda.Diagnose behind `dcl doctor`),
// which also says what is missing when CUDA is asked for and cannot be used.
//
// The kernels under the CPU backend are in gpu/kernels; kernels.Sgemm is a plain-Go float32
// matrix multiply for anyone. GoMLX problems found on the way are listed, with their smallest
// reproducers, in docs/engine.md.
package gpu
