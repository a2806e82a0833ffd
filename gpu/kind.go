package gpu

import (
	"fmt"
	"strings"

	"github.com/gomlx/compute"

	"github.com/dcl-beam/dcl-beam/gpu/cpu"
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
	// XLACPU is the same XLA backend as CUDA, built with the same tag and code, on XLA's own
	// CPU PJRT plugin (installed by `make deps`): the programs a GPU runs, compiled and run on
	// any machine, for tests and checks. Auto never picks it: the pure-Go CPU backend is the
	// faster on CPUs, and the only one Beam's cgo-free workers have.
	XLACPU Kind = "xla-cpu"
	// Auto is CUDA when it is compiled in and a plugin and a GPU are found, CPU otherwise.
	Auto Kind = "auto"
)

// BackendsHelp names the backends for the --backend flags' help.
const BackendsHelp = "cpu, cuda, xla-cpu (XLA's CPU plugin from make deps: the GPU's code path on a CPU, for checks) or auto (cuda when this build has it and a GPU is found, else cpu)"

// PluginHelp is the --plugin flags' help.
const PluginHelp = "PJRT plugin file (.so) for --backend=cuda|xla-cpu|auto (empty: search; `dcl doctor` says where)"

// Kinds lists every backend --backend names, the default (Auto) last.
func Kinds() []Kind { return []Kind{CPU, CUDA, XLACPU, Auto} }

// Compiled lists the backends compiled into this binary, CPU first.
func Compiled() []Kind {
	if cuda.Compiled {
		return []Kind{CPU, CUDA, XLACPU}
	}
	return []Kind{CPU}
}

// ParseKind reads a --backend value: cpu, cuda, xla-cpu or auto (empty means auto).
func ParseKind(s string) (Kind, error) {
	switch b := Kind(strings.ToLower(strings.TrimSpace(s))); b {
	case CPU, CUDA, XLACPU, Auto:
		return b, nil
	case "":
		return Auto, nil
	default:
		return "", fmt.Errorf("unknown backend %q: want %s", s, kindList())
	}
}

func kindList() string {
	names := make([]string, len(Kinds()))
	for i, k := range Kinds() {
		names[i] = string(k)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// IsXLA says whether a backend of this kind runs programs compiled by XLA (CUDA and XLACPU):
// fixed shapes, compilation per shape, the XLA precision options.
func (k Kind) IsXLA() bool { return k == CUDA || k == XLACPU }

// KindOf says which kind of backend be is: CPU for the pure-Go backend, XLACPU for XLA on its
// CPU plugin, CUDA for XLA on any other plugin.
func KindOf(be compute.Backend) Kind {
	switch {
	case be.Name() == cpu.BackendName:
		return CPU
	case cuda.IsXLACPU(be):
		return XLACPU
	default:
		return CUDA
	}
}
