//go:build cuda

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/xlacputest"
	"github.com/dcl-beam/dcl-beam/verify"
)

// TestXLACPUGPUCheckScript runs the GPU check's script, part "check", with DCL_BACKEND=xla-cpu:
// every GPU command of the check on XLA's CPU plugin through the cuda build (this test
// binary), so that a GPU machine's first run is not the script's first run. The doctor must
// find the plugin, and the check's agreement rows (float32 and tf32, which a CPU computes in
// float32) must pass. PyTorch is $DCL_TORCH_PYTHON's where make test gives one.
func TestXLACPUGPUCheckScript(t *testing.T) {
	xlacputest.Require(t)
	pack := gpuPack(t)
	out := filepath.Join(t.TempDir(), "out")
	env := []string{"DCL_BACKEND=xla-cpu", "DCL_GPU_CHECK_FLAGS=--skip=speed,packing", "DCL_TORCH_FLAGS=--rows resnet18-cifar:32:2:float32"}
	if py := os.Getenv("DCL_TORCH_PYTHON"); py != "" {
		env = append(env, "PYTHON="+py)
	}
	summary := gpuScript(t, pack, filepath.Join(pack, "work"), out, "check", env...)
	for _, f := range []string{"summary.md", "run.log", "doctor.json", "gpu-check.json", "gpu-check.md"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s", f)
		}
	}
	doctor, _ := os.ReadFile(filepath.Join(out, "doctor.json"))
	checkContains(t, "doctor.json", string(doctor), "xla-cpu")
	check := "| gpu-check | 0 |"
	if strings.Contains(summary, "| torch | 2 |") {
		check = "| gpu-check | 1 |"
	}
	checkContains(t, "summary", summary, "| doctor | 0 |", check, "result: **AGREE**")
	raw, err := os.ReadFile(filepath.Join(out, "gpu-check.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res verify.CheckResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("gpu-check.json: %v", err)
	}
	if res.Backend != "xla-cpu" {
		t.Errorf("gpu-check.json: backend %q, want xla-cpu", res.Backend)
	}
	for name, a := range map[string]*verify.AgreementResult{"float32": res.Agreement, "tf32": res.AgreementTF32} {
		switch {
		case a == nil:
			t.Errorf("gpu-check.json has no %s agreement row", name)
		case !a.Pass:
			t.Errorf("the %s agreement row fails on xla-cpu: %+v", name, *a)
		}
	}
}

// TestXLACPUTrainResumes: dcl train --backend=xla-cpu trains, stops at --max-steps with its
// checkpoint and resumes to the end, as on the CPU backend (TestTrainRunsAndResumes), and the
// resumed run's log records the xla-cpu backend.
func TestXLACPUTrainResumes(t *testing.T) {
	xlacputest.Require(t)
	data, out := t.TempDir(), t.TempDir()
	writeTrainShards(t, data, 12, 8, 2)
	args := []string{"train", "--input", data, "--output", out, "--model", "mlp", "--width", "4", "--batch-size", "4",
		"--epochs", "2", "--lr", "0.1", "--backend", "xla-cpu", "--json", "--max-steps", "4"}
	code, stdout, stderr := runDCL(args...)
	if code != exitOK || !strings.Contains(stderr, "train: stopped after 4 of 6 steps") {
		t.Fatalf("dcl train --backend=xla-cpu = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	code, stdout, stderr = runDCL(append(args[:len(args)-2:len(args)-2], "--resume")...)
	if code != exitOK || !strings.Contains(stderr, "train: finished after 6 of 6 steps") {
		t.Fatalf("dcl train --backend=xla-cpu --resume = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if !strings.Contains(stdout+stderr, "xla-cpu") {
		t.Errorf("the resumed run does not say it ran on xla-cpu:\nstdout: %s\nstderr: %s", stdout, stderr)
	}
}
