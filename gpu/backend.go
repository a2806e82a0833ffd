package gpu

import (
	"fmt"
	"strings"

	"github.com/dcl-beam/dcl-beam/gpu/cuda"
)

// Backend names a compute backend as the --backend flag spells it.
type Backend string

const (
	// CPU is the project's pure-Go CPU backend (package gpu/cpu, GoMLX backend "dclcpu"): every
	// build has it, Beam workers included.
	CPU Backend = "cpu"
	// CUDA is GoMLX's XLA backend with a CUDA PJRT plugin, loaded at run time; it needs cgo and
	// the "cuda" build tag.
	CUDA Backend = "cuda"
	// Auto is CUDA when it is compiled in and a plugin and a GPU are found, CPU otherwise.
	Auto Backend = "auto"
)

// Compiled lists the backends compiled into this binary, CPU first.
func Compiled() []Backend {
	if cuda.Compiled {
		return []Backend{CPU, CUDA}
	}
	return []Backend{CPU}
}

// ParseBackend reads a --backend value: cpu, cuda or auto (empty means auto).
func ParseBackend(s string) (Backend, error) {
	switch b := Backend(strings.ToLower(strings.TrimSpace(s))); b {
	case CPU, CUDA, Auto:
		return b, nil
	case "":
		return Auto, nil
	default:
		return "", fmt.Errorf("unknown backend %q: want cpu, cuda or auto", s)
	}
}
