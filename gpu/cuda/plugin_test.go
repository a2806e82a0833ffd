package cuda

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// touch writes a small file at dir/rel, creating folders.
func touch(t *testing.T, dir, rel string) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("not really a plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// TestFind plants plugins in a fake file tree and checks the search order and the list of
// places reported when nothing is found.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	explicit := touch(t, dir, "explicit/plugin.so")
	fromEnv := touch(t, dir, "env/plugin.so")
	fromGoMLX := touch(t, dir, "gomlx/plugin.so")
	fromPath := touch(t, dir, "pjrt/pjrt_c_api_cuda_plugin.so")
	touch(t, dir, "venv/lib/python3.12/site-packages/jax_plugins/xla_cuda9/xla_cuda_plugin.so")
	touch(t, dir, "venv/lib/python3.12/site-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so")
	jax13 := touch(t, dir, "venv/lib/python3.12/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so")
	venv := []string{filepath.Join(dir, "venv")}
	cases := []struct {
		name     string
		explicit string
		env      map[string]string
		want     string
		from     string
	}{
		{"explicit first", explicit, map[string]string{PluginEnv: fromEnv}, explicit, "--plugin"},
		{"DCL_PJRT_PLUGIN", "", map[string]string{PluginEnv: fromEnv, "GOMLX_BACKEND": "xla:" + fromGoMLX}, fromEnv, "$" + PluginEnv},
		{"GOMLX_BACKEND", "", map[string]string{"GOMLX_BACKEND": "xla:" + fromGoMLX + ",tf32"}, fromGoMLX, "$GOMLX_BACKEND"},
		{"PJRT_PLUGIN_LIBRARY_PATH", "", map[string]string{"PJRT_PLUGIN_LIBRARY_PATH": filepath.Dir(fromPath)}, fromPath, "$PJRT_PLUGIN_LIBRARY_PATH"},
		{"JAX, newest CUDA (13 beats 12 and 9)", "", map[string]string{"GOMLX_BACKEND": "xla:cuda"}, jax13, "JAX's CUDA plugin in the Python site-packages"},
	}
	for _, c := range cases {
		got, err := Env{Getenv: envOf(c.env), PythonRoots: venv}.Find(context.Background(), c.explicit)
		if err != nil || got.Path != c.want || got.From != c.from {
			t.Errorf("%s: got %+v, %v; want %q from %q", c.name, got, err, c.want, c.from)
		}
	}
	_, err := Env{Getenv: envOf(nil), PythonRoots: []string{filepath.Join(dir, "empty")}}.Find(context.Background(), "")
	var nf *NotFoundError
	if !errors.As(err, &nf) || len(nf.Searched) == 0 || !strings.Contains(err.Error(), filepath.Join(dir, "empty")) {
		t.Fatalf("error %v does not list where it looked", err)
	}
	if _, err := (Env{}).Find(context.Background(), filepath.Join(dir, "missing.so")); err == nil || !strings.Contains(err.Error(), "missing.so") {
		t.Fatalf("a missing explicit plugin gave %v", err)
	}
	if _, err := (Env{}).Find(context.Background(), dir); err == nil {
		t.Fatal("a folder given as plugin was accepted")
	}
}

func TestCUDAMajorOf(t *testing.T) {
	for _, c := range []struct {
		path string
		want int
	}{
		{"/v/lib/python3.12/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so", 13},
		{"/x/jax_cuda12_plugin/xla_cuda_plugin.so", 12},
		{"/old/cuda11-copies/xla_cuda12/xla_cuda_plugin.so", 12},
		{"/usr/local/lib/go-xla/pjrt_c_api_cuda_plugin.so", 0},
	} {
		if got := CUDAMajorOf(c.path); got != c.want {
			t.Errorf("CUDAMajorOf(%q) = %d, want %d", c.path, got, c.want)
		}
	}
}

func TestReadDriver(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, text, want string
		major            int
		err              bool
	}{
		{"proprietary", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07  Sun Aug 17 00:00:00 UTC 2025\nGCC version:  gcc version 12.2.0\n", "580.82.07", 580, false},
		{"open", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.183.01  Release Build  (dvs-builder@U16)\n", "535.183.01", 535, false},
		{"two numbers", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.42  Mon\n", "470.42", 470, false},
		{"garbage", "hello\n", "", 0, true},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := readDriver(p)
		if (err != nil) != c.err || d.Version != c.want || d.Major != c.major {
			t.Errorf("%s: got %+v, %v; want %s (%d), error %v", c.name, d, err, c.want, c.major, c.err)
		}
	}
	if _, err := readDriver(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing version file gave %v", err)
	}
}

func TestParseSMI(t *testing.T) {
	got := parseSMI([]byte("0, NVIDIA H100 80GB HBM3, 81559, 1, 580.82.07\n1, NVIDIA H200, 143771, 600, 580.82.07\n\n"))
	if len(got) != 2 || got[0].Name != "NVIDIA H100 80GB HBM3" || got[0].MemoryTotalMB != 81559 || got[1].MemoryUsedMB != 600 || got[1].Index != 1 {
		t.Fatalf("parseSMI = %+v", got)
	}
}

func TestReadLdSoConf(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "ld.so.conf")
	if err := os.MkdirAll(filepath.Join(dir, "ld.so.conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(conf, "# comment\ninclude ld.so.conf.d/*.conf\n/opt/a\n")
	write(filepath.Join(dir, "ld.so.conf.d", "b.conf"), "/opt/b  # trailing\n")
	write(filepath.Join(dir, "ld.so.conf.d", "c.conf"), "include "+conf+"\n") // a loop must end
	got := readLdSoConf(conf, 0)
	if len(got) < 3 || got[0] != "/opt/b" || got[len(got)-1] != "/opt/a" {
		t.Fatalf("readLdSoConf = %v", got)
	}
}

func TestPJRTVersionProblem(t *testing.T) {
	for _, c := range []struct {
		v, want string
	}{{"0.104", ""}, {"0.120", ""}, {"0.83", "older than go-xla's"}, {"1.2", "major version"}, {"", ""}} {
		got := pjrtVersionProblem(c.v)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("pjrtVersionProblem(%q) = %q, want %q", c.v, got, c.want)
		}
	}
}
