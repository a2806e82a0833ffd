// Package cuda is the glue under the project's XLA backends: it finds a CUDA PJRT plugin
// (FindPlugin), explains what would stop it from loading (Diagnose, behind `dcl doctor`), and,
// in binaries built with the "cuda" tag, loads it through go-xla's compute/xla backend by
// absolute path (Load), never downloading anything and without pre-allocating GPU memory.
// LoadCPU loads XLA's own CPU plugin (installed by `make deps`) with the same code, options
// and patched go-xla, so that the programs a GPU runs are compiled and run on any machine;
// RecordPrograms shows what was compiled (StableHLO text, input-output aliasing).
//
// It does not import the CPU backend (gpu/cpu), so `dcl doctor` and the checks here build and
// run anywhere, CGO_ENABLED=0 included; only the loading and the driver probe need cgo and the
// tag.
package cuda
