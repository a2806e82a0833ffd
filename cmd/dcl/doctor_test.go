package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/gpu/cuda"
)

// TestDoctor checks `dcl doctor` on this machine: exit 0 whatever it finds, fast, a line saying
// whether CUDA is available and why not, and JSON that reads back.
func TestDoctor(t *testing.T) {
	if _, help, _ := runDCL("help"); !strings.Contains(help, "\n  doctor ") || !strings.Contains(help, "\n  gpu-check ") {
		t.Errorf("dcl help does not list doctor and gpu-check:\n%s", help)
	}
	start := time.Now()
	code, out, errOut := runDCL("doctor")
	if code != exitOK {
		t.Fatalf("dcl doctor exited %d: %s", code, errOut)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("dcl doctor took %v, want under a second", d)
	}
	if !strings.Contains(out, "backends compiled in: cpu") || !strings.Contains(out, "cuda: ") {
		t.Fatalf("dcl doctor said:\n%s", out)
	}
	noGPU, _ := filepath.Glob("/dev/nvidia[0-9]*")
	if (len(noGPU) == 0 || !cuda.Compiled) && !strings.Contains(out, "cuda: not available (") {
		t.Errorf("no usable GPU here, yet dcl doctor said:\n%s", out)
	}
	code, out, errOut = runDCL("doctor", "--json", "--no-load")
	if code != exitOK {
		t.Fatalf("dcl doctor --json exited %d: %s", code, errOut)
	}
	var r cuda.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Compiled) == 0 {
		t.Fatalf("dcl doctor --json printed %q: %v", out, err)
	}
	if !r.Available {
		code, _, errOut = runDCL("doctor", "--strict", "--no-load")
		if code != exitError || !strings.Contains(errOut, "cuda: not available (") {
			t.Errorf("dcl doctor --strict without CUDA exited %d: %s", code, errOut)
		}
	}
}

// TestGPUCheckQuickOnCPU runs `dcl gpu-check --backend=cpu --quick` end to end, its child
// processes included (this test binary plays dcl for them, through DCL_TEST_AS_MAIN).
func TestGPUCheckQuickOnCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("runs tiny training steps in child processes (a few seconds)")
	}
	t.Setenv("DCL_TEST_AS_MAIN", "1")
	out := t.TempDir()
	// bf16 on the CPU backend is not the check's business: leave the speed rows to the
	// package's own test and check the wiring here.
	code, stdout, errOut := runDCL("gpu-check", "--backend=cpu", "--quick", "--output="+out, "--skip=speed,packing", "--record=make gpu-check")
	if code != exitOK {
		t.Fatalf("dcl gpu-check exited %d:\n%s\n%s", code, stdout, errOut)
	}
	for _, want := range []string{"result: **AGREE**", "## Feeding", "`make gpu-check`"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	for _, f := range []string{"gpu-check.json", "gpu-check.md"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}
