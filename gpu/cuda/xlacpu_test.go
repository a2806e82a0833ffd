//go:build cuda

package cuda

import (
	"context"
	"strings"
	"testing"
)

// TestXLACPUDoctor: `dcl doctor` finds the plugin `make deps` installed, names the wheel it
// came from, loads it and lists one CPU device; LoadCPU makes as many devices as asked.
func TestXLACPUDoctor(t *testing.T) {
	if _, err := DefaultEnv().FindCPUPlugin(""); err != nil {
		t.Skipf("xla-cpu: %v", err)
	}
	r := Diagnose(context.Background(), DiagnoseOptions{})
	x := r.XLACPU
	if x == nil || !x.Available || x.Load == nil || len(x.Load.Devices) != 1 || x.Load.PJRTVersion == "" {
		t.Fatalf("doctor on xla-cpu: %+v", x)
	}
	if strings.HasPrefix(x.Plugin.From, "make deps") && !strings.HasPrefix(x.Wheel, "lammps-jax-pjrt-cpu==") {
		t.Errorf("plugin from make deps without its wheel: %+v", x)
	}
	text := r.String()
	for _, want := range []string{"backends compiled in: cpu, cuda, xla-cpu", "xla-cpu: available (1 device(s))", "plugin: " + x.Plugin.Path, "PJRT C API " + x.Load.PJRTVersion} {
		if !strings.Contains(text, want) {
			t.Errorf("doctor's report lacks %q:\n%s", want, text)
		}
	}
	be, err := LoadCPU(context.Background(), CPUOptions{Devices: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Finalize()
	if n := be.NumDevices(); n != 3 || !IsXLACPU(be) {
		t.Errorf("LoadCPU with 3 devices: %d devices, xla-cpu %v", n, IsXLACPU(be))
	}
	if _, err := LoadCPU(context.Background(), CPUOptions{Plugin: "/nonexistent/plugin.so"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/plugin.so") {
		t.Errorf("a missing plugin: %v", err)
	}
}
