package reproduce

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machine describes where a reproduction runs, for its wall times: the CPU model and core
// count, the load on the machine when it started (load, "" where unknown: other work slows
// it), and the GPU where a run may train on one (backend cuda or auto, or the option that
// overrides every run's).
func machine(runs []RunConfig, backend, load string) string {
	desc := fmt.Sprintf("%d CPU cores", runtime.NumCPU())
	if m := cpuModel(); m != "" {
		desc = m + ", " + desc
	}
	if load != "" {
		desc += " (load average " + load + " when it started)"
	}
	gpuPossible := backend == "cuda" || backend == "auto"
	for _, r := range runs {
		gpuPossible = gpuPossible || (backend == "" && r.Backend() != "cpu")
	}
	if gpuPossible {
		if g := gpuNames(); g != "" {
			desc += "; GPU: " + g
		}
	}
	return desc
}

// ThisMachine describes this machine as machine does for a reproduction without a GPU run:
// for the records of other runs (the kill hunt's).
func ThisMachine() string { return machine(nil, "", loadAverage()) }

// cpuModel is the first "model name" of /proc/cpuinfo ("" where there is none).
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// gpuNames are the GPUs nvidia-smi lists, "" without it.
func gpuNames() string {
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, smi, "--query-gpu=name", "--format=csv,noheader").Output()
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", ", ")), " ")
}

// loadAverage is the machine's one-minute load average ("" where /proc/loadavg is not).
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(data)); len(f) > 0 {
		return f[0]
	}
	return ""
}
