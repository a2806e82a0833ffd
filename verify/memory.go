package verify

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// gpuMemory samples nvidia-smi while a child runs: the child's own GPU memory when nvidia-smi
// lists it (it does not in PID namespaces of some containers) and the whole device's memory in
// use, from which the memory in use before the child started is subtracted. XLA's allocator
// (like PyTorch's) keeps what it once took, so the largest sample is the peak.
type gpuMemory struct {
	smi      string
	pid      int
	baseline float64
	mu       sync.Mutex
	proc     float64
	device   float64
	stop     chan struct{}
	done     chan struct{}
}

// smiQuery runs nvidia-smi with args and returns its CSV rows' fields.
func smiQuery(ctx context.Context, smi string, args ...string) [][]string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, smi, append(args, "--format=csv,noheader,nounits")...).Output()
	if err != nil {
		return nil
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		rows = append(rows, f)
	}
	return rows
}

// deviceUsedMiB is the memory in use on GPU 0, or -1.
func deviceUsedMiB(ctx context.Context, smi string) float64 {
	rows := smiQuery(ctx, smi, "--query-gpu=memory.used")
	if len(rows) == 0 || len(rows[0]) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(rows[0][0], 64)
	if err != nil {
		return -1
	}
	return v
}

// newGPUMemory returns a sampler, or nil when there is no nvidia-smi.
func newGPUMemory(ctx context.Context) *gpuMemory {
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil
	}
	return &gpuMemory{smi: smi, baseline: deviceUsedMiB(ctx, smi)}
}

// start begins sampling every 200 ms for pid.
func (m *gpuMemory) start(ctx context.Context, pid int) {
	m.pid, m.stop, m.done = pid, make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			m.sample(ctx)
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
}

func (m *gpuMemory) sample(ctx context.Context) {
	for _, r := range smiQuery(ctx, m.smi, "--query-compute-apps=pid,used_memory") {
		if len(r) < 2 || r[0] != strconv.Itoa(m.pid) {
			continue
		}
		if v, err := strconv.ParseFloat(r[1], 64); err == nil {
			m.mu.Lock()
			m.proc = max(m.proc, v)
			m.mu.Unlock()
		}
	}
	if v := deviceUsedMiB(ctx, m.smi); v >= 0 {
		m.mu.Lock()
		m.device = max(m.device, v)
		m.mu.Unlock()
	}
}

// finish stops sampling and returns the peak and where it came from.
func (m *gpuMemory) finish() (float64, string) {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc > 0 {
		return m.proc, "nvidia-smi, the process's used_memory (CUDA context included)"
	}
	if m.device > 0 && m.baseline >= 0 {
		return m.device - m.baseline, "nvidia-smi, the device's memory.used growth while the process ran (CUDA context included)"
	}
	return 0, ""
}
