package gpucheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts is the repository's scripts folder, from this package's.
const scripts = "../../scripts"

// TestTorchScriptCompiles keeps scripts/torch_step.py valid Python, and checks that without
// PyTorch (or without a GPU) it says so in its JSON and exits 2, and that with PyTorch its
// rows read back as TorchResult.
func TestTorchScriptCompiles(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	script := filepath.Join(scripts, "torch_step.py")
	if out, err := exec.Command(py, "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)",
		script, filepath.Join(t.TempDir(), "torch_step.pyc")).CombinedOutput(); err != nil {
		t.Fatalf("py_compile: %v\n%s", err, out)
	}
	out := filepath.Join(t.TempDir(), "torch.json")
	cmd := exec.Command(py, script, "--out", out, "--device", "cpu", "--quick", "--warmup", "1", "--steps", "1", "--rows", "resnet18-cifar:32:2:float32")
	msg, err := cmd.CombinedOutput()
	var res TorchResult
	raw, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatalf("torch_step.py wrote no JSON (%v): %v\n%s", err, rerr, msg)
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("torch_step.py's JSON does not read back: %v\n%s", err, raw)
	}
	if res.Error != "" {
		// No PyTorch here: the message must say so, and the exit status be 2.
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(res.Error, "PyTorch") {
			t.Fatalf("without PyTorch: exit %v, error %q", err, res.Error)
		}
		t.Skipf("no PyTorch here: %s", res.Error)
	}
	if err != nil || len(res.Rows) != 1 || res.Rows[0].ImagesPerSec <= 0 || res.Rows[0].Error != "" {
		t.Fatalf("torch_step.py on the CPU: %v, %+v\n%s", err, res, msg)
	}
}

// TestGPUCheckScriptOnCPU runs scripts/gpu-check.sh as on a GPU machine, on a CPU: a pack with
// a freshly built dcl, the check in quick mode on the CPU backend, PyTorch (if any) on the CPU.
// Every step must leave its files, and the output folder must hold at most 8.
func TestGPUCheckScriptOnCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("builds dcl and runs the script (about a minute)")
	}
	for _, tool := range []string{"bash", "xz", "timeout", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	pack := t.TempDir()
	bin := filepath.Join(t.TempDir(), "dcl-cuda")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/dcl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out, err := exec.Command("bash", "-c", "xz -1 -c '"+bin+"' > '"+filepath.Join(pack, "dcl-cuda.xz")+"'").CombinedOutput(); err != nil {
		t.Fatalf("xz: %v\n%s", err, out)
	}
	if data := fashionDir(); data != "" {
		if err := os.Symlink(data, filepath.Join(pack, "fashion-mnist")); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command("bash", filepath.Join(scripts, "gpu-check.sh"), out, "check")
	cmd.Env = append(os.Environ(), "DCL_GPU_PACK="+pack, "DCL_GPU_WORK="+filepath.Join(pack, "work"),
		"DCL_GPU_CHECK_FLAGS=--backend=cpu --quick --skip=speed", "DCL_TORCH_FLAGS=--device cpu --quick --warmup 1 --steps 1 --rows resnet18-cifar:32:2:float32")
	msg, err := cmd.CombinedOutput()
	t.Logf("gpu-check.sh: %v\n%s", err, msg)
	files, rerr := os.ReadDir(out)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if len(files) > 8 {
		t.Errorf("%d files in the output folder, at most 8 come back", len(files))
	}
	for _, f := range []string{"summary.md", "run.log", "doctor.json", "torch-step.json", "gpu-check.json", "gpu-check.md"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s", f)
		}
	}
	summary, _ := os.ReadFile(filepath.Join(out, "summary.md"))
	// Without PyTorch here the check reports that as a problem and exits 1; everything else
	// must pass.
	check := "| gpu-check | 0 |"
	if strings.Contains(string(summary), "| torch | 2 |") {
		check = "| gpu-check | 1 |"
	}
	for _, want := range []string{"| doctor | 0 |", check, "cuda: not available (", "result: **AGREE**", "## Feeding"} {
		if !strings.Contains(string(summary), want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
}
