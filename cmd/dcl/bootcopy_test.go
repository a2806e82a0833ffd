package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A worker started by Beam's boot loader removes the copy of itself that boot made under
// /tmp/bin*/ (and the folder), and nothing else.
func TestRemoveBootCopy(t *testing.T) {
	t.Setenv("PIPELINE_OPTIONS_FILE", filepath.Join(t.TempDir(), "pipeline_options.json"))
	dir, err := os.MkdirTemp("/tmp/", "bin*") // as boot makes it
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	exe := filepath.Join(dir, "worker")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Not when boot's folder holds something else, nor without boot's variable.
	other := filepath.Join(dir, "notes")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if removeBootCopy(exe) {
		t.Errorf("%s was removed from a folder that holds another file", exe)
	}
	os.Remove(other)
	t.Setenv("PIPELINE_OPTIONS_FILE", "")
	if removeBootCopy(exe) {
		t.Errorf("%s was removed without a start by boot", exe)
	}
	t.Setenv("PIPELINE_OPTIONS_FILE", filepath.Join(t.TempDir(), "pipeline_options.json"))
	if !removeBootCopy(exe) {
		t.Fatalf("%s was not removed", exe)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("boot's folder %s is still there (%v)", dir, err)
	}

	other = filepath.Join(t.TempDir(), "worker")
	if err := os.WriteFile(other, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{other, "/tmp/bin/worker", "/tmp/bin1/dcl", "/usr/local/bin/worker", "/tmp/binx/worker", "/tmp/bin1/sub/worker"} {
		if removeBootCopy(p) {
			t.Errorf("%s was taken for boot's copy", p)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("%s: %v", other, err)
	}
}
