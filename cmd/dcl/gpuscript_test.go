package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/fashionmnist"
	"github.com/dcl-beam/dcl-beam/reproduce"
)

// The tests of scripts/gpu-check.sh run its parts as on a GPU machine, on a CPU: a pack whose
// dcl is this test binary (through DCL_TEST_AS_MAIN, so no second link of dcl) and whose
// fashion-mnist/ is the real data set, the GPU's work replaced by the CPU backend and small
// configs through the script's DCL_*_FLAGS.

// gpuPack makes the folder make gpu-pack makes: dcl-cuda.xz (a wrapper that runs this test
// binary as dcl) and fashion-mnist/. It skips the test where the script's tools or the data
// are missing.
func gpuPack(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"bash", "xz", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	data := fashionmnist.Dir(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pack := t.TempDir()
	wrapper := "#!/bin/sh\nDCL_TEST_AS_MAIN=1 exec '" + self + "' \"$@\"\n"
	xz := exec.Command("xz", "-c")
	xz.Stdin = strings.NewReader(wrapper)
	packed, err := xz.Output()
	if err != nil {
		t.Fatalf("xz: %v", err)
	}
	if err := os.WriteFile(filepath.Join(pack, "dcl-cuda.xz"), packed, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(data, filepath.Join(pack, "fashion-mnist")); err != nil {
		t.Fatal(err)
	}
	return pack
}

// gpuScript runs scripts/gpu-check.sh OUT PART with the pack and the work folder (the GPU
// machine's disk) and the extra environment env, and returns OUT/summary.md. It checks what
// every part must hold: at most 8 files in OUT, since no more come back.
func gpuScript(t *testing.T, pack, work, out, part string, env ...string) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "gpu-check.sh"), out, part)
	cmd.Env = append(append(os.Environ(), "DCL_GPU_PACK="+pack, "DCL_GPU_WORK="+work), env...)
	msg, err := cmd.CombinedOutput()
	t.Logf("gpu-check.sh %s %s: %v\n%s", out, part, err, msg)
	files, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) > 8 {
		t.Errorf("%d files in %s, at most 8 come back", len(files), out)
	}
	summary, _ := os.ReadFile(filepath.Join(out, "summary.md"))
	return string(summary)
}

// checkContains reports each of wants that what (named name) lacks.
func checkContains(t *testing.T, name, what string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(what, want) {
			t.Errorf("%s lacks %q:\n%s", name, want, what)
		}
	}
}

// TestGPUCheckScriptOnCPU runs the script's part "check": the check in quick mode on the CPU
// backend, PyTorch (if any) on the CPU. Every step must leave its files.
func TestGPUCheckScriptOnCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the script and the check in child processes (a few seconds)")
	}
	pack := gpuPack(t)
	out := filepath.Join(t.TempDir(), "out")
	summary := gpuScript(t, pack, filepath.Join(pack, "work"), out, "check",
		"DCL_GPU_CHECK_FLAGS=--backend=cpu --quick --skip=speed,packing", "DCL_TORCH_FLAGS=--device cpu --quick --warmup 1 --steps 1 --rows resnet18-cifar:32:2:float32")
	for _, f := range []string{"summary.md", "run.log", "doctor.json", "torch-step.json", "gpu-check.json", "gpu-check.md"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s", f)
		}
	}
	// Without PyTorch here the check reports that as a problem and exits 1; everything else
	// must pass.
	check := "| gpu-check | 0 |"
	if strings.Contains(summary, "| torch | 2 |") {
		check = "| gpu-check | 1 |"
	}
	checkContains(t, "summary", summary, "| doctor | 0 |", check, "cuda: not available (", "result: **AGREE**", "## Feeding")
}

// evalConfig is a whole experiment small enough for a test: two runs of a narrow small CNN
// on 128 Fashion-MNIST images at 16 px, every evaluation and both baselines.
const evalConfig = `name: tiny
dataset: {name: idx, input: unused, pretrain_split: train, train_split: train, test_split: test, image_size: 16, limit: 128, eval_limit: 64}
preprocess: {augment: simclr-cifar, passes: 2, seed: 7}
train:
  defaults: {model: small-cnn, width: 4, epochs: 2, batch_size: 16, temperature: 0.2, lr: 0.3, backend: cpu, checkpoint_every: 4}
  runs:
    - {name: infonce, loss: infonce}
    - {name: dcl, loss: dcl}
evaluate:
  knn: {k: 10, temperature: 0.1}
  linear: {epochs: 5, lr: 1, batch_size: 32}
  npc: {batch_sizes: [8, 16], samples: 2}
  knn_every: 1
  baselines: [raw-pixels, random-init]
`

// TestGPUCheckEvalPartOnCPU runs the script's part "eval": the short reproduction replaced by
// a tiny config on the CPU backend, and the agreement check comparing the CPU with itself. It
// must leave the stage times and the agreement in OUT and every step's status in summary.md.
func TestGPUCheckEvalPartOnCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the script's eval part (a reproduction and two agreement checks)")
	}
	pack, tmp := gpuPack(t), t.TempDir()
	config := filepath.Join(tmp, "tiny.yaml")
	if err := os.WriteFile(config, []byte(evalConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "out")
	summary := gpuScript(t, pack, filepath.Join(pack, "work"), out, "eval",
		"DCL_EVAL_FLAGS=--config="+config+" --backend=cpu",
		"DCL_AGREE_FLAGS=--a=cpu --b=cpu --bank=48 --queries=16 --k=5 --probe-epochs=2")
	timesJSON, err := os.ReadFile(filepath.Join(out, "reproduce-stages.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st reproduce.StageTimes
	if err := json.Unmarshal(timesJSON, &st); err != nil {
		t.Fatal(err)
	}
	if st.Experiment != "tiny" || st.Config == nil || st.CPU == "" || st.Backend != "cpu" || st.Wall <= 0 {
		t.Errorf("stage times: experiment %q, config %v, CPU %q, backend %q, wall %v", st.Experiment, st.Config != nil, st.CPU, st.Backend, st.Wall)
	}
	rates := map[string]bool{}
	for _, s := range st.Stages {
		if s.Seconds < 0 || (s.ImagesPerS != nil && !(*s.ImagesPerS > 0)) {
			t.Errorf("stage %+v", s)
		}
		rates[s.Stage] = s.ImagesPerS != nil
	}
	for _, stage := range []string{"train dcl", "embed dcl", "knn dcl", "embed random-init", "train infonce"} {
		if !rates[stage] {
			t.Errorf("stage %q missing or without images/s in %v", stage, rates)
		}
	}
	for _, prec := range []string{"tf32", "float32"} {
		var agree struct {
			OK        bool    `json:"ok"`
			Tolerance float64 `json:"tolerance"`
			Precision string  `json:"precision"`
		}
		name := "agreement-" + prec + ".json"
		if raw, err := os.ReadFile(filepath.Join(out, name)); err != nil || json.Unmarshal(raw, &agree) != nil || !agree.OK || !(agree.Tolerance > 0) || agree.Precision != prec {
			t.Errorf("%s: %v, %+v", name, err, agree)
		}
	}
	checkContains(t, "summary", summary, "| eval-reproduce | 0 |", "| eval-agree-tf32 | 0 |", "| eval-agree-float32 | 0 |", `- stage="train dcl" wall=`, "images_per_s=")
}

// tinyGPUConfig is fashion-mnist-gpu's layout (cells of two seeds at the small batch, one at
// the large, kNN after every epoch, kNN and linear, the raw-pixel baseline) shrunk to seconds
// on a CPU.
const tinyGPUConfig = `name: fashion-mnist-gpu-tiny
dataset: {name: idx, input: unused, pretrain_split: train, train_split: train, test_split: test, image_size: 32, limit: 64, eval_limit: 64}
preprocess: {augment: dcl-paper, passes: 1, seed: 1}
train:
  defaults: {model: resnet18-cifar, width: 4, epochs: 1, temperature: 0.07, lr: 0.03, weight_decay: 0.0005, backend: cuda, checkpoint_every: 1000}
  runs:
    - {loss: infonce, batch_size: 8, seeds: [1, 2]}
    - {loss: dcl, batch_size: 8, seeds: [1, 2]}
    - {loss: infonce, batch_size: 16}
evaluate:
  knn: {k: 10, temperature: 0.1}
  linear: {epochs: 2, lr: 30, batch_size: 256}
  knn_every: 1
  baselines: [raw-pixels]
`

// TestGPUScriptExperimentContinuesOnAFreshMachine runs the script's part "experiment" with a
// shrunk config, twice: the first sends back the report and the state within the files that
// come back; the second, on a fresh work folder (a fresh machine) with only that state,
// continues from it: nothing trained before is trained again.
func TestGPUScriptExperimentContinuesOnAFreshMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the script's experiment part twice")
	}
	pack, tmp := gpuPack(t), t.TempDir()
	config := filepath.Join(tmp, "tiny.yaml")
	if err := os.WriteFile(config, []byte(tinyGPUConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	experiment := func(out, work, state string) string {
		summary := gpuScript(t, pack, work, out, "experiment", "DCL_EXPERIMENT_CONFIG="+config,
			"DCL_EXPERIMENT_FLAGS=--backend=cpu", "DCL_EXPERIMENT_STATE="+state)
		checkContains(t, out+"/summary.md", summary, "| experiment | 0 |", "| experiment-state | 0 |")
		report, err := os.ReadFile(filepath.Join(out, "experiment-report.md"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(out, "experiment-state.tgz")); err != nil {
			t.Fatal(err)
		}
		return string(report)
	}
	first := filepath.Join(tmp, "out1")
	experiment(first, filepath.Join(tmp, "machine1"), filepath.Join(tmp, "no-state.tgz"))
	report := experiment(filepath.Join(tmp, "out2"), filepath.Join(tmp, "machine2"), filepath.Join(first, "experiment-state.tgz"))
	checkContains(t, "the continued experiment's report", report, "- train infonce-b8-s1: skipped", "- train dcl-b8-s2: skipped",
		"- knn infonce-b16: skipped", "- preprocess pretrain: ", "made again, identical")
}
