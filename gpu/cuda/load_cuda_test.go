//go:build cuda

package cuda

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestLoadThroughPreloadedLibraries loads a fake plugin whose libraries are off the loader
// path, with real dlopen calls: the preloading must let the plugin itself open (its needed
// libraries found by soname), and the failure must then be go-xla's "no PJRT API in this
// file", explained as such — not a missing library.
func TestLoadThroughPreloadedLibraries(t *testing.T) {
	m := newFakeMachine(t, machineOpts{driver: "580.82.07", devices: true, libcuda: true, libdevice: true})
	// The control, first: libraries stay loaded for the whole process once preloaded, so
	// only before that does the plain load show what the preloading fixes.
	if _, _, err := load(context.Background(), m.plugin, nil, nil, ""); err == nil || !strings.Contains(err.Error(), "cannot open shared object file") {
		t.Fatalf("loading without preloading: %v; want a library the loader cannot find", err)
	}
	r := m.env.Diagnose(context.Background(), DiagnoseOptions{})
	if r.Load == nil {
		t.Fatalf("no load attempted:\n%s", r)
	}
	if r.Load.OK {
		t.Fatalf("a fake plugin loaded:\n%s", r)
	}
	if !strings.Contains(r.Load.Error, "GetPjrtApi") || strings.Contains(r.Load.Error, "cannot open shared object file") {
		t.Fatalf("load error %q: want the missing GetPjrtApi symbol, with every library found", r.Load.Error)
	}
	if !strings.Contains(problemsText(r), "the file is not a PJRT plugin") {
		t.Errorf("problems:\n%s", problemsText(r))
	}
	if r.Available {
		t.Error("available with a fake plugin")
	}
	_, err := Load(context.Background(), Options{Env: &m.env})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), m.plugin) {
		t.Errorf("Load: %v", err)
	}
}
