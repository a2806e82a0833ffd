package gpu

import (
	"fmt"
	"strings"

	"github.com/dcl-beam/dcl-beam/gpu/cuda"
)

// Kind names a compute backend as the --backend flag spells it (not Backend: compute.Backend
// and cpu.Backend are the backends themselves).
type Kind string

const (
	// CPU is the project's pure-Go CPU backend (package gpu/cpu, GoMLX backend "dclcpu"): every
	// build has it, Beam workers included.
	CPU Kind = "cpu"
	// CUDA is GoMLX's XLA backend with a CUDA PJRT plugin, loaded at run time; it needs cgo and
	// the "cuda" build tag.
	CUDA Kind = "cuda"
	// Auto is CUDA when it is compiled in and a plugin and a GPU are found, CPU otherwise.
	Auto Kind = "auto"
)

// Compiled lists the backends compiled into this binary, CPU first.
func Compiled() []Kind {
	if cuda.Compiled {
		return []Kind{CPU, CUDA}
	}
	return []Kind{CPU}
}

// ParseKind reads a --backend value: cpu, cuda or auto (empty means auto).
func ParseKind(s string) (Kind, error) {
	switch b := Kind(strings.ToLower(strings.TrimSpace(s))); b {
	case CPU, CUDA, Auto:
		return b, nil
	case "":
		return Auto, nil
	default:
		return "", fmt.Errorf("unknown backend %q: want cpu, cuda or auto", s)
	}
}
