//go:build cuda

package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
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

// TestXLACPUTrainDevices: dcl train --backend=xla-cpu --devices=4 prints the loss trajectory
// of --devices=1; a run stopped on 4 devices resumes on 2 and on 1, one stopped
// on 1 resumes on 4, each on the same trajectory; and a batch that does not split over the
// devices is refused naming both numbers.
func TestXLACPUTrainDevices(t *testing.T) {
	xlacputest.Require(t)
	data := t.TempDir()
	writeTrainShards(t, data, 16, 8, 2)
	train := func(out string, extra ...string) (int, string) {
		args := append([]string{"train", "--input", data, "--output", out, "--model", "small-cnn", "--width", "4", "--batch-size", "8",
			"--epochs", "2", "--lr", "0.1", "--backend", "xla-cpu", "--json"}, extra...)
		code, stdout, stderr := runDCL(args...)
		return code, stdout + stderr
	}
	one, four := t.TempDir(), t.TempDir()
	if code, log := train(one, "--devices", "1"); code != exitOK {
		t.Fatalf("dcl train --devices=1 = %d\n%s", code, log)
	}
	want := stepLosses(t, filepath.Join(one, "train.jsonl"))
	if len(want) != 4 {
		t.Fatalf("one device logged losses %v, want 4 steps", want)
	}
	stopped := map[string]string{"4": four, "1": t.TempDir()}
	for from, out := range stopped {
		if code, log := train(out, "--devices", from, "--max-steps", "2"); code != exitOK || !strings.Contains(log, "devices="+from) {
			t.Fatalf("dcl train --devices=%s --max-steps=2 = %d (want it to log devices %s)\n%s", from, code, from, log)
		}
	}
	for _, c := range []struct{ from, to string }{{"4", "2"}, {"4", "1"}, {"1", "4"}} {
		out := t.TempDir()
		if err := os.CopyFS(out, os.DirFS(stopped[c.from])); err != nil {
			t.Fatal(err)
		}
		if code, log := train(out, "--devices", c.to, "--resume"); code != exitOK || !strings.Contains(log, "devices="+c.to) {
			t.Fatalf("dcl train --devices=%s --resume from %s devices = %d\n%s", c.to, c.from, code, log)
		}
		got := stepLosses(t, filepath.Join(out, "train.jsonl"))
		t.Logf("losses on %s then %s devices %v, on one %v", c.from, c.to, got, want)
		if len(got) != len(want) {
			t.Fatalf("steps: one device logged losses %v, %s then %s devices %v", want, c.from, c.to, got)
		}
		// DCL's loss is negative and may pass near zero: the difference is relative to it, or
		// to 1 where it is smaller. The bound checks the wiring (the flags, the learning rate,
		// the state a resume carries), ten times the rounding these steps show; the N-device
		// step's own precision is trainstep's TestXLACPUDevicesTrainAsOne.
		for i := range want {
			if d := math.Abs(got[i]-want[i]) / max(math.Abs(want[i]), 1); d > 5e-5 {
				t.Errorf("step %d: loss %.8g on %s then %s devices, %.8g on one (difference %.2g of max(|loss|, 1), bound 5e-5)", i+1, got[i], c.from, c.to, want[i], d)
			}
		}
	}
	code, log := train(t.TempDir(), "--devices", "3")
	if code == exitOK || !strings.Contains(log, "8 view pairs do not split evenly over 3 devices") {
		t.Errorf("dcl train --batch-size=8 --devices=3 = %d, want a refusal naming both numbers\n%s", code, log)
	}
}

// stepLosses returns the loss of every step line of a train.jsonl.
func stepLosses(t *testing.T, path string) []float64 {
	t.Helper()
	var out []float64
	for _, line := range stepScalars(t, path) {
		loss, err := strconv.ParseFloat(strings.Fields(line)[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, loss)
	}
	return out
}
