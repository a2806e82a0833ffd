// Package cuda is the CUDA glue under the project's XLA backend: it finds a CUDA PJRT plugin
// (FindPlugin), explains what would stop it from loading (Diagnose, behind `dcl doctor`), and,
// in binaries built with the "cuda" tag, loads it through go-xla's compute/xla backend by
// absolute path (Load), never downloading anything and without pre-allocating GPU memory.
//
// It does not import the CPU backend (gpu/cpu), so `dcl doctor` and the checks here build and
// run anywhere, CGO_ENABLED=0 included; only Load and the driver probe need cgo and the tag.
package cuda
