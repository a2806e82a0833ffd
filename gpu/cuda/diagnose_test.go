package cuda

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildSO compiles a tiny shared library with gcc: soname, DT_NEEDED on each of needs (paths
// of libraries built before), and rpath as DT_RUNPATH when given. Tests that need real ELF files
// skip without gcc.
func buildSO(t *testing.T, out, soname string, needs []string, rpath string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	src := out + ".c"
	sym := strings.NewReplacer(".", "_", "-", "_").Replace(soname)
	if err := os.WriteFile(src, []byte(fmt.Sprintf("int f_%s(void) { return 1; }\n", sym)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-shared", "-fPIC", "-o", out, src, "-Wl,-soname," + soname, "-Wl,--no-as-needed"}
	args = append(args, needs...)
	if rpath != "" {
		args = append(args, "-Wl,--enable-new-dtags,-rpath,"+rpath)
	}
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	return out
}

// fakeMachine is a GPU machine in a temporary folder: a Python environment with JAX's CUDA 13
// plugin and the pip NVIDIA libraries, a driver version file, device files and ld.so.conf.
type fakeMachine struct {
	root, site, plugin, nvLib, sysLib string
	env                               Env
}

type machineOpts struct {
	driver      string // driver version file's version, "" for none
	devices     bool
	runpath     string // the plugin's RUNPATH
	libcuda     bool   // libcuda.so.1 in the loader's folders
	dropCublas  bool   // libcublasLt is not installed at all
	ldLibrary   bool   // LD_LIBRARY_PATH holds the pip lib folder
	noPlugin    bool
	pluginCUDA  int
	libdevice   bool
	extraEnvKVs map[string]string
}

func newFakeMachine(t *testing.T, o machineOpts) fakeMachine {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is needed to build fake shared libraries")
	}
	root := t.TempDir()
	cuda := o.pluginCUDA
	if cuda == 0 {
		cuda = 13
	}
	m := fakeMachine{root: root, site: filepath.Join(root, "venv/lib/python3.12/site-packages")}
	m.nvLib = filepath.Join(m.site, "nvidia/cu13/lib")
	m.sysLib = filepath.Join(root, "syslib")
	if err := os.MkdirAll(m.sysLib, 0o755); err != nil {
		t.Fatal(err)
	}
	// libcublas.so.13 needs libcublasLt.so.13, found through its own $ORIGIN RUNPATH, as the
	// pip wheels do.
	lt := filepath.Join(m.nvLib, "libcublasLt.so.13")
	buildSO(t, lt, "libcublasLt.so.13", nil, "")
	cublas := buildSO(t, filepath.Join(m.nvLib, "libcublas.so.13"), "libcublas.so.13", []string{lt}, "$ORIGIN")
	if o.dropCublas {
		if err := os.Remove(lt); err != nil {
			t.Fatal(err)
		}
	}
	// libcudnn.so.9 needs libnvrtc.so.13 and has no RUNPATH: both must be opened by path,
	// libnvrtc first.
	nvrtc := buildSO(t, filepath.Join(m.nvLib, "libnvrtc.so.13"), "libnvrtc.so.13", nil, "")
	cudnn := buildSO(t, filepath.Join(m.nvLib, "libcudnn.so.9"), "libcudnn.so.9", []string{nvrtc}, "")
	if !o.noPlugin {
		m.plugin = buildSO(t, filepath.Join(m.site, fmt.Sprintf("jax_plugins/xla_cuda%d/xla_cuda_plugin.so", cuda)), "xla_cuda_plugin.so",
			[]string{cublas, cudnn}, o.runpath)
	}
	if o.libcuda {
		buildSO(t, filepath.Join(m.sysLib, "libcuda.so.1"), "libcuda.so.1", nil, "")
	}
	if o.libdevice {
		touch(t, m.site, "nvidia/cu13/nvvm/libdevice/libdevice.10.bc")
	}
	conf := filepath.Join(root, "ld.so.conf")
	if err := os.WriteFile(conf, []byte(m.sysLib+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(root, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	touch(t, dev, "nvidiactl") // present in containers without a GPU: must not count
	if o.devices {
		touch(t, dev, "nvidia0")
	}
	drv := filepath.Join(root, "proc-driver-nvidia-version")
	if o.driver != "" {
		if err := os.WriteFile(drv, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "+o.driver+"  Sun Aug 17 2025\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kv := map[string]string{}
	if o.ldLibrary {
		kv["LD_LIBRARY_PATH"] = m.nvLib
	}
	for k, v := range o.extraEnvKVs {
		kv[k] = v
	}
	// The real system folders resolve libc and friends, which every library needs.
	m.env = Env{Getenv: envOf(kv), PythonRoots: []string{filepath.Join(root, "venv")}, DriverVersionFile: drv, DevDir: dev,
		LdSoConf: conf, SystemLibDirs: DefaultEnv().SystemLibDirs}
	return m
}

func problemsText(r Report) string {
	var b strings.Builder
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "[%s] %s | fix: %s\n", p.Severity, p.What, p.Fix)
	}
	return b.String()
}

// TestDiagnose runs the diagnosis on fake machines, one failure each, and checks the report
// names the failure and its fix. The load itself needs a GPU and is not attempted (no build
// here has both the cuda tag and a device), so what is checked is everything before it.
func TestDiagnose(t *testing.T) {
	good := machineOpts{driver: "580.82.07", devices: true, libcuda: true, libdevice: true}
	cases := []struct {
		name string
		opts machineOpts
		// want are substrings of the problems (errors and warnings); none lists substrings
		// that must not appear.
		want []string
		none []string
		// preload is how many libraries must be opened by path; check runs extra checks.
		preload int
		check   func(*testing.T, fakeMachine, Report)
	}{
		{name: "CPU-only machine", opts: machineOpts{noPlugin: true},
			want: []string{"[error] no NVIDIA GPU", "[error] no CUDA PJRT plugin found", "jax[cuda13]"},
			none: []string{"driver"}},
		{name: "good machine: libraries off the loader path are preloaded", opts: good, preload: 3,
			want: []string{"[warning] 3 libraries the plugin needs are not on the loader path", "export LD_LIBRARY_PATH="},
			none: []string{"[error] no NVIDIA GPU", "too old", "libcuda", "not installed"},
			check: func(t *testing.T, m fakeMachine, r Report) {
				if !strings.Contains(problemsText(r), m.nvLib) {
					t.Errorf("the LD_LIBRARY_PATH fix does not name %s", m.nvLib)
				}
				// Dependencies first: libnvrtc before libcudnn; libcublasLt is found through
				// libcublas's own RUNPATH once that is open, so it is not preloaded.
				nv, dnn := -1, -1
				for i, p := range r.Preload {
					switch filepath.Base(p) {
					case "libnvrtc.so.13":
						nv = i
					case "libcudnn.so.9":
						dnn = i
					case "libcublasLt.so.13":
						t.Errorf("libcublasLt preloaded, but libcublas's RUNPATH finds it")
					}
				}
				if nv < 0 || dnn < 0 || nv > dnn {
					t.Errorf("preload order %v: libnvrtc must come before libcudnn", r.Preload)
				}
				if want := filepath.Join(m.site, "nvidia/cu13"); r.CUDADataDir != want {
					t.Errorf("cuda data dir %q, want %q", r.CUDADataDir, want)
				}
				if r.PluginCUDA != 13 || r.Plugin.Path != m.plugin {
					t.Errorf("plugin %+v, CUDA %d", r.Plugin, r.PluginCUDA)
				}
			}},
		{name: "LD_LIBRARY_PATH set", opts: machineOpts{driver: "580.82.07", devices: true, libcuda: true, ldLibrary: true},
			none: []string{"loader path", "not installed"},
			check: func(t *testing.T, m fakeMachine, r Report) {
				for _, l := range r.Libraries {
					if strings.HasPrefix(l.Name, "libcu") && l.Name != "libcuda.so.1" && (l.Via != "LD_LIBRARY_PATH" && l.Via != "RUNPATH") {
						t.Errorf("%s resolved via %q", l.Name, l.Via)
					}
				}
			}},
		// DT_RUNPATH serves the plugin's own needs only, not those of the libraries it
		// loads: libcudnn's libnvrtc is still off the path (glibc's rule; DT_RPATH would
		// be inherited).
		{name: "RUNPATH into the pip tree", opts: machineOpts{driver: "580.82.07", devices: true, libcuda: true, runpath: "$ORIGIN/../../nvidia/cu13/lib"},
			want: []string{"[warning] 1 library the plugin needs is not on the loader path (libnvrtc.so.13)"},
			none: []string{"not installed"}, preload: 1,
			check: func(t *testing.T, m fakeMachine, r Report) {
				for _, l := range r.Libraries {
					if l.Name == "libcudnn.so.9" && (l.Via != "RUNPATH" || !l.Reachable) {
						t.Errorf("libcudnn resolved %+v, want via RUNPATH", l)
					}
				}
			}},
		{name: "a library not installed", opts: machineOpts{driver: "580.82.07", devices: true, libcuda: true, dropCublas: true},
			want: []string{"[error] shared libraries the plugin needs are not installed: libcublasLt.so.13 (needed by "}},
		{name: "driver too old for CUDA 13", opts: machineOpts{driver: "535.183.01", devices: true, libcuda: true},
			want: []string{"[error] driver 535.183.01 is too old for the plugin's CUDA 13 (it needs driver ≥ 580)", "jax[cuda12]"}},
		{name: "CUDA 12 plugin on driver 535 is fine", opts: machineOpts{driver: "535.183.01", devices: true, libcuda: true, pluginCUDA: 12},
			none: []string{"too old"}},
		{name: "no libcuda", opts: machineOpts{driver: "580.82.07", devices: true},
			want: []string{"[error] libcuda.so.1 (the driver's user-space library) is not on the loader path"}},
		{name: "device files but no driver", opts: machineOpts{devices: true, libcuda: true},
			want: []string{"[error] no NVIDIA kernel driver loaded"}},
		{name: "explicit plugin that is missing", opts: machineOpts{driver: "580.82.07", devices: true, libcuda: true,
			extraEnvKVs: map[string]string{PluginEnv: "/nonexistent/plugin.so"}},
			want: []string{"[error] PJRT plugin from $" + PluginEnv}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newFakeMachine(t, c.opts)
			r := m.env.Diagnose(context.Background(), DiagnoseOptions{NoLoad: true})
			text := problemsText(r)
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("problems lack %q:\n%s", w, text)
				}
			}
			for _, n := range c.none {
				if strings.Contains(text, n) {
					t.Errorf("problems mention %q:\n%s", n, text)
				}
			}
			if c.preload > 0 && len(r.Preload) != c.preload {
				t.Errorf("preload %v, want %d libraries", r.Preload, c.preload)
			}
			if r.Available || r.Why == "" {
				t.Errorf("available %v, why %q: nothing here can load a plugin", r.Available, r.Why)
			}
			if !Compiled && !strings.Contains(r.Why, "without CUDA support") {
				t.Errorf("why %q does not say CUDA is not compiled in", r.Why)
			}
			if s := r.String(); !strings.Contains(s, "cuda: not available (") {
				t.Errorf("report text lacks the availability line:\n%s", s)
			}
			if _, err := json.Marshal(r); err != nil {
				t.Fatal(err)
			}
			if c.check != nil {
				c.check(t, m, r)
			}
		})
	}
}

// TestDiagnoseHere runs the real diagnosis on this machine: whatever it finds, it must answer
// fast, say whether CUDA is available, and, where there is no GPU, why not.
func TestDiagnoseHere(t *testing.T) {
	start := time.Now()
	r := Diagnose(context.Background(), DiagnoseOptions{NoLoad: true})
	if d := time.Since(start); d > time.Second {
		t.Errorf("diagnosis took %v, want under a second", d)
	}
	s := r.String()
	if !strings.Contains(s, "cuda: ") || !strings.Contains(s, "backends compiled in: cpu") {
		t.Fatalf("report:\n%s", s)
	}
	if len(r.DeviceFiles) == 0 && (r.Available || !strings.Contains(s, "cuda: not available (")) {
		t.Fatalf("no GPU here, yet the report says:\n%s", s)
	}
	t.Logf("\n%s", s)
}
