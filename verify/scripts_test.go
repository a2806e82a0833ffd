package verify

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts is the repository's scripts folder, from this package's.
const scripts = "../scripts"

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
