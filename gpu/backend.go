package gpu

// Backend names a compute backend as the --backend flag spells it.
type Backend string

const (
	// CPU is GoMLX's pure-Go backend: every build has it, Beam workers included.
	CPU Backend = "cpu"
	// CUDA is GoMLX's XLA backend with a CUDA PJRT plugin, loaded at run time; it needs cgo and
	// the "cuda" build tag.
	CUDA Backend = "cuda"
)

// Compiled lists the backends compiled into this binary, CPU first.
func Compiled() []Backend {
	if cudaCompiled {
		return []Backend{CPU, CUDA}
	}
	return []Backend{CPU}
}
