package trainstep

import (
	"context"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stubTorch is just enough of torch and torchvision for the module file to run its top level
// and its reader (which builds tensors with torch.frombuffer): the test is about what the
// generated code does with names and bytes, not about PyTorch.
var stubTorch = map[string]string{
	"torch/__init__.py": `float32 = float64 = int64 = "dtype"
class _T:
    def reshape(self, *a): return self
    def clone(self): return self
def frombuffer(b, dtype): return _T()
def relu(x): return x
`,
	"torch/nn/__init__.py": `Module = object
def __getattr__(name):
    return lambda *a, **k: None
`,
	"torchvision/__init__.py": "",
}

// checkModule runs the module file as its docstring says, with the names the docstring's
// recipe gives (which must be the files' names byte for byte), reads the weights, and then
// reads them with one byte of the data flipped, which must be refused.
const checkModule = `
import ast, os, runpy, sys
module, want_module, want_weights = sys.argv[1], bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])
tree = ast.parse(open(module, "rb").read())
doc = ast.get_docstring(tree, clean=False)
calls = {}
for line in doc.splitlines():
    line = line.strip()
    for fn in ("runpy.run_path(", 'm["load_state_dict"]('):
        if fn in line:
            arg = line.split(fn, 1)[1]
            calls[fn] = ast.literal_eval(arg[: arg.index('"', 1) + 1])
assert os.fsencode(calls["runpy.run_path("]) == want_module, calls
assert os.fsencode(calls['m["load_state_dict"]('])== want_weights, calls
assert len([n for n in tree.body if isinstance(n, ast.Expr)]) == 1, "code besides the docstring"
os.chdir(os.path.dirname(module))
m = runpy.run_path(calls["runpy.run_path("])
m["load_state_dict"](calls['m["load_state_dict"](']) 
data = bytearray(open(calls['m["load_state_dict"]('], "rb").read())
data[-1] ^= 1
open("flipped.safetensors", "wb").write(data)
try:
    m["load_state_dict"]("flipped.safetensors")
except ValueError as e:
    assert "damaged" in str(e), e
else:
    raise SystemExit("a flipped byte was loaded")
print("ok")
`

// TestExportModuleTakesAnyName: an export named to break out of the module file's strings
// (quotes, triple quotes, backslashes, a newline, bytes that are not UTF-8) gives a module
// file whose recipe names the files exactly and which runs no code of the name's; its reader
// refuses the weights with a byte flipped.
func TestExportModuleTakesAnyName(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	stub := t.TempDir()
	for name, src := range stubTorch {
		p := filepath.Join(stub, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ckpt := resnet50Checkpoint(t, SmallCNN, 8)
	names := []string{
		`plain`,
		`x"""; open("PWNED", "w") #`,
		`y"; open("PWNED", "w"); "`,
		"z\\\"\"\"\n__import__('os').system('touch PWNED')\n\"\"\"",
		`back\slash\`,
		"caf\xc3\xa9 \xff\xfe",
		`{0} %s ' '''`,
	}
	for _, name := range names {
		t.Run(hex.EncodeToString([]byte(name))[:min(16, 2*len(name))], func(t *testing.T) {
			dir := t.TempDir()
			exp, err := SaveTorch(context.Background(), ckpt, filepath.Join(dir, name+TorchExtension), false)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(python, "-c", checkModule, exp.Module,
				hex.EncodeToString([]byte(filepath.Base(exp.Module))), hex.EncodeToString([]byte(filepath.Base(exp.Output))))
			cmd.Env = append(os.Environ(), "PYTHONPATH="+stub, "PYTHONDONTWRITEBYTECODE=1")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "ok") {
				t.Errorf("%q: %v\n%s", name, err, out)
			}
			if _, err := os.Stat(filepath.Join(dir, "PWNED")); err == nil {
				t.Errorf("%q: the name ran code", name)
			}
		})
	}
}
