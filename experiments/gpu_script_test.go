package experiments_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

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

// TestGPUScriptExperimentContinuesOnAFreshMachine runs scripts/gpu-check.sh's part
// "experiment" as on a GPU machine, on the CPU with a shrunk config, twice: the first sends
// back the report and the state within the 8 files that come back; the second, on a fresh
// work folder (a fresh machine) with only that state, continues from it: nothing trained
// before is trained again.
func TestGPUScriptExperimentContinuesOnAFreshMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds dcl and runs the script twice")
	}
	for _, tool := range []string{"bash", "xz", "timeout", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	data := os.Getenv("DCL_FASHION_MNIST")
	if data == "" {
		data = "/usr/share/datasets/fashion-mnist"
	}
	if _, err := os.Stat(filepath.Join(data, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST not found in %s", data)
	}
	pack, tmp := t.TempDir(), t.TempDir()
	bin := filepath.Join(tmp, "dcl-cuda")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/dcl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out, err := exec.Command("bash", "-c", "xz -1 -c '"+bin+"' > '"+filepath.Join(pack, "dcl-cuda.xz")+"'").CombinedOutput(); err != nil {
		t.Fatalf("xz: %v\n%s", err, out)
	}
	if err := os.Symlink(data, filepath.Join(pack, "fashion-mnist")); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(tmp, "tiny.yaml")
	if err := os.WriteFile(config, []byte(tinyGPUConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	script := func(out, work, state string) string {
		cmd := exec.Command("bash", "../scripts/gpu-check.sh", out, "experiment")
		cmd.Env = append(os.Environ(), "DCL_GPU_PACK="+pack, "DCL_GPU_WORK="+work, "DCL_EXPERIMENT_CONFIG="+config,
			"DCL_EXPERIMENT_FLAGS=--backend=cpu", "DCL_EXPERIMENT_STATE="+state)
		msg, err := cmd.CombinedOutput()
		t.Logf("gpu-check.sh %s experiment: %v\n%s", out, err, msg)
		summary, _ := os.ReadFile(filepath.Join(out, "summary.md"))
		files, _ := os.ReadDir(out)
		if len(files) > 8 {
			t.Errorf("%d files in %s, at most 8 come back", len(files), out)
		}
		for _, want := range []string{"| experiment | 0 |", "| experiment-state | 0 |"} {
			if !strings.Contains(string(summary), want) {
				t.Errorf("%s/summary.md lacks %q:\n%s", out, want, summary)
			}
		}
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
	script(first, filepath.Join(tmp, "machine1"), filepath.Join(tmp, "no-state.tgz"))
	report := script(filepath.Join(tmp, "out2"), filepath.Join(tmp, "machine2"), filepath.Join(first, "experiment-state.tgz"))
	for _, want := range []string{"- train infonce-b8-s1: skipped", "- train dcl-b8-s2: skipped", "- knn infonce-b16: skipped",
		"- preprocess pretrain: ", "made again, identical"} {
		if !strings.Contains(report, want) {
			t.Errorf("the continued experiment's report lacks %q:\n%s", want, report)
		}
	}
}
