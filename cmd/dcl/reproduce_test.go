package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReproduceCommandLineErrors(t *testing.T) {
	dir := t.TempDir()
	unknownKey := filepath.Join(dir, "unknown-key.yaml")
	os.WriteFile(unknownKey, []byte("name: x\nbogus: 1\n"), 0o644)
	badBeam := filepath.Join(dir, "bad-beam.yaml")
	os.WriteFile(badBeam, []byte(`name: bad-beam
dataset: {name: idx, input: /nowhere}
preprocess: {augment: simclr-cifar, passes: 1, beam_flags: ["--not_a_beam_flag=1"]}
train: {defaults: {model: small-cnn, epochs: 1, batch_size: 8, temperature: 0.1}, runs: [{name: a, loss: dcl}]}
`), 0o644)
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"reproduce"}, "--config is required"},
		{[]string{"reproduce", "--config=no-such-experiment"}, "no built-in config of that name"},
		{[]string{"reproduce", "--config=" + unknownKey}, "field bogus not found"},
		{[]string{"reproduce", "--config=" + badBeam, "--out=" + dir}, `"--not_a_beam_flag=1" is not a Beam flag`},
	}
	for _, tt := range tests {
		code, _, stderr := runDCL(tt.give...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("dcl %q = %d, %q; want exit 2 and %q", tt.give, code, stderr, tt.want)
		}
	}
}

// Without the Debian package the demo says how to get the data, and how to point at a copy.
func TestDemoWithoutDataSaysWhatToDo(t *testing.T) {
	code, _, stderr := runDCL("demo", "--data="+t.TempDir(), "--out="+t.TempDir())
	if code != exitError {
		t.Fatalf("dcl demo without data exited %d, want %d", code, exitError)
	}
	for _, want := range []string{"apt-get install dataset-fashion-mnist", "--data=PATH"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("dcl demo printed %q, want it to mention %q", stderr, want)
		}
	}
}

// Every built-in experiment is listed in dcl reproduce -h, so people can find them.
func TestReproduceHelpListsTheBuiltInExperiments(t *testing.T) {
	code, out, _ := runDCL("reproduce", "-h")
	if code != exitOK {
		t.Fatalf("dcl reproduce -h exited %d", code)
	}
	for _, name := range []string{"demo-fashion-mnist", "cifar10-batch-size", "imagenet-batch-size", "cifar10-temperature"} {
		if !strings.Contains(out, name) {
			t.Errorf("dcl reproduce -h does not list %s", name)
		}
	}
}
