package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/guard"
	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// TestGuardedFlagsExist: every flag the guard table names is a flag of its command, so a
// renamed flag cannot silently leave an output unlocked.
func TestGuardedFlagsExist(t *testing.T) {
	for name, g := range guarded {
		c := lookup(name)
		if c == nil {
			t.Errorf("guarded command %q does not exist", name)
			continue
		}
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		c.setup(fs, streams{stdout: io.Discard, stderr: io.Discard})
		for _, f := range append(append(append([]string{}, g.outputs...), g.inputs...), g.holders...) {
			if fs.Lookup(f) == nil {
				t.Errorf("dcl %s has no flag --%s", name, f)
			}
		}
	}
}

// TestEveryWriterTakesTheLock: with another writer holding an output (a lock taken here, as
// a running command holds it), every command that writes that output, under any spelling of
// its path, refuses at once and names the holder.
func TestEveryWriterTakesTheLock(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	config := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, killConfig, filepath.Join(dir, "idx")), 0o644); err != nil {
		t.Fatal(err)
	}
	release, err := guard.Acquire(t.Context(), guard.Claim{Command: "dcl holder", Outputs: []guard.Path{{Path: out}}})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	in := filepath.Join(dir, "in")
	tests := [][]string{
		{"preprocess", "--dataset=idx", "--input=" + in, "--output=" + out + "/"},
		{"train", "--input=" + in, "--output=" + dir + "//out"},
		{"train", "--input=" + in, "--output=" + out, "--resume"},
		{"embed", "--checkpoint=" + in, "--input=" + in, "--output=" + out},
		{"embed", "--checkpoint=" + in, "--input=" + in, "--output=" + out + "/x.parquet"},
		{"export", "--checkpoint=" + in, "--output=" + out + "/m.safetensors"},
		{"knn", "--train=" + in, "--test=" + in + "2", "--output=" + out + "/knn.json"},
		{"linear", "--train=" + in, "--test=" + in + "2", "--output=" + out},
		{"npc", "--input=" + in, "--output=" + out},
		{"tsne", "--input=" + in, "--output=" + out + "/t.png"},
		{"gpu-check", "--output=" + out},
		{"shards", "inspect", in, "--png=" + out},
		{"reproduce", "--config=" + config, "--output=" + out},
	}
	for _, args := range tests {
		code, _, stderr := runDCL(args...)
		if code != exitError || !strings.Contains(stderr, "another dcl command is writing") || !strings.Contains(stderr, "dcl holder (pid") {
			t.Errorf("dcl %q exited %d: %q; want 1 and the holder named", args, code, stderr)
		}
	}
	// Another folder is free.
	code, _, stderr := runDCL("shards", "inspect", in, "--png="+filepath.Join(dir, "elsewhere"))
	if strings.Contains(stderr, "another dcl command") {
		t.Errorf("a free output: exit %d, %q", code, stderr)
	}
}

// TestOutputsThatWouldDestroyInputsAreRefused: an output that is, holds or lies in an input
// is a usage error naming both, before anything is read or written.
func TestOutputsThatWouldDestroyInputsAreRefused(t *testing.T) {
	dir := t.TempDir()
	s, e := filepath.Join(dir, "shards"), filepath.Join(dir, "emb")
	photos := filepath.Join(dir, "photos")
	if err := os.MkdirAll(filepath.Join(photos, "cat"), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "folder.yaml")
	if err := os.WriteFile(config, []byte(strings.Replace(killConfig, "name: idx, input: %s, image_size: 16", "name: folder, input: "+photos+", image_size: 16", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"embed", "--checkpoint=" + dir + "/run", "--input=" + s, "--output=" + s + "/pass-000"}, "lies inside --input=" + s},
		{[]string{"embed", "--checkpoint=" + dir + "/run", "--input=" + s, "--output=" + dir + "/run"}, "is or holds --checkpoint"},
		{[]string{"knn", "--train=" + e, "--test=" + e + "2", "--output=" + e}, "is also --train=" + e},
		{[]string{"linear", "--train=" + e, "--test=" + e + "2", "--output=" + e + "2/"}, "is also --test"},
		{[]string{"tsne", "--input=" + e + "," + e + "2", "--output=" + e + "2"}, "is also --input=" + e + "2"},
		{[]string{"npc", "--input=" + e, "--output=" + dir}, "holds --input=" + e},
		{[]string{"preprocess", "--dataset=folder", "--input=" + photos, "--output=" + photos + "/out"}, "lies inside --input"},
		{[]string{"train", "--input=" + s, "--output=" + s}, "is also --input"},
		{[]string{"reproduce", "--config=" + config, "--output=" + photos + "/runs"}, "lies inside dataset.input=" + photos},
		{[]string{"reproduce", "--config=" + config, "--output=" + photos + "/runs", "--plan"}, "lies inside dataset.input=" + photos},
	}
	for _, tt := range tests {
		code, _, stderr := runDCL(tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("dcl %q exited %d: %q; want 2 and one line with %q", tt.args, code, stderr, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(photos, "runs")); err == nil {
		t.Error("reproduce wrote into its dataset's folder")
	}
}

// TestTwoWritersAtOnce starts two dcl processes that write the same output at the same
// moment, for each kind of output the prober raced (a dataset, a training run, an embeddings
// folder and an embeddings file): one writes it, the other is refused, and what is there is
// whole and of one writer (metadata and data agree).
func TestTwoWritersAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("trains and embeds in child processes")
	}
	root := t.TempDir()
	input := filepath.Join(root, "idx")
	pipelinetest.WriteIDX(t, input, "train", 96, false)
	data := filepath.Join(root, "data")
	if code, _, stderr := runDCL("preprocess", "--dataset=idx", "--input="+input, "--output="+data, "--passes=1", "--size=16", "--progress=off"); code != exitOK {
		t.Fatalf("preprocess: %s", stderr)
	}
	trainArgs := func(out, loss string) []string {
		return []string{"train", "--input=" + data, "--output=" + out, "--model=small-cnn", "--width=4", "--batch-size=16",
			"--epochs=2", "--lr=0.3", "--backend=cpu", "--loss=" + loss, "--progress=off"}
	}
	// Two finished runs, of two losses, to embed with.
	runs := map[string]string{}
	for _, loss := range []string{"infonce", "dcl"} {
		runs[loss] = filepath.Join(root, "run-"+loss)
		if code, _, stderr := runDCL(trainArgs(runs[loss], loss)...); code != exitOK {
			t.Fatalf("train %s: %s", loss, stderr)
		}
	}

	race := func(name string, a, b []string, check func(t *testing.T, winner int)) {
		t.Run(name, func(t *testing.T) {
			outs := make([]string, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i, args := range [][]string{a, b} {
				wg.Go(func() { outs[i], errs[i] = runChild(t, root, args) })
			}
			wg.Wait()
			winner := -1
			for i := range 2 {
				switch {
				case errs[i] == nil:
					winner = i
				case !strings.Contains(outs[i], "another dcl command is writing") && !strings.Contains(outs[i], "already holds checkpoints"):
					t.Errorf("writer %d failed for another reason: %v\n%s", i, errs[i], outs[i])
				}
			}
			if winner < 0 {
				t.Fatalf("neither writer succeeded:\n%s\n%s", outs[0], outs[1])
			}
			if errs[0] == nil && errs[1] == nil {
				t.Logf("both writers finished: they did not overlap") // embed replaces a finished output
			}
			check(t, winner)
		})
	}
	race("train", trainArgs(filepath.Join(root, "r"), "infonce"), trainArgs(filepath.Join(root, "r"), "dcl"), func(t *testing.T, winner int) {
		var sum trainstep.Summary
		b, err := os.ReadFile(filepath.Join(root, "r", trainstep.SummaryName))
		if err != nil || json.Unmarshal(b, &sum) != nil {
			t.Fatalf("summary: %v", err)
		}
		h, err := trainstep.ReadCheckpointHeader(context.Background(), sum.Checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"infonce", "dcl"}[winner]; string(h.Step.Loss.Kind) != want {
			t.Errorf("the checkpoint holds a %s model; the run that finished trained %s", h.Step.Loss.Kind, want)
		}
	})
	embedArgs := func(out, loss string) []string {
		return []string{"embed", "--checkpoint=" + runs[loss], "--input=" + data, "--output=" + out, "--parts=2", "--threads=1", "--pass=-1"}
	}
	for _, out := range []string{filepath.Join(root, "emb"), filepath.Join(root, "emb.parquet")} {
		race("embed "+filepath.Base(out), embedArgs(out, "infonce"), embedArgs(out, "dcl"), func(t *testing.T, winner int) {
			r, err := embeddings.Open(context.Background(), out, 0)
			if err != nil {
				t.Fatalf("the embeddings the winner wrote: %v", err)
			}
			defer r.Close()
			if want := runs[[]string{"infonce", "dcl"}[winner]]; !strings.Contains(r.Meta()["checkpoint"], want) {
				t.Errorf("the embeddings name checkpoint %q; the embed that finished used %s", r.Meta()["checkpoint"], want)
			}
		})
	}
}

// runChild runs dcl as a child process in dir.
func runChild(t *testing.T, dir string, args []string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DCL_TEST_AS_MAIN=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// TestUnwritableTempDirIsOneLine: a temporary folder that is missing or read-only (a
// container's read-only root) is one line naming it and TMPDIR, before Beam starts (Beam
// panics on it).
func TestUnwritableTempDirIsOneLine(t *testing.T) {
	dir := t.TempDir()
	readOnly := filepath.Join(dir, "ro")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, killConfig, filepath.Join(dir, "idx")), 0o644); err != nil {
		t.Fatal(err)
	}
	tmps := []string{filepath.Join(dir, "missing")}
	if f, err := os.CreateTemp(readOnly, "probe"); err == nil {
		f.Close() // root writes anyway: only the missing folder can be tried
	} else {
		tmps = append(tmps, readOnly)
	}
	in := filepath.Join(t.TempDir(), "in")
	pipelinetest.WriteIDX(t, in, "train", 16, false)
	for _, tmp := range tmps {
		t.Setenv("TMPDIR", tmp)
		for _, args := range [][]string{
			{"preprocess", "--dataset=idx", "--input=" + in, "--output=" + filepath.Join(dir, "out")},
			{"embed", "--checkpoint=" + in, "--input=" + in, "--output=" + filepath.Join(dir, "emb")},
			{"reproduce", "--config=" + config, "--output=" + filepath.Join(dir, "run")},
		} {
			code, _, stderr := runDCL(args...)
			if code != exitError || !strings.Contains(stderr, "the temporary folder "+tmp+" cannot be written") ||
				!strings.Contains(stderr, "set TMPDIR") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Errorf("TMPDIR=%s dcl %s exited %d: %q", tmp, args[0], code, stderr)
			}
		}
	}
}

// TestLocksNeedNoTempDir: the lock lives beside the output, so a missing temporary folder is
// never made for it.
func TestLocksNeedNoTempDir(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nonexistent")
	t.Setenv("TMPDIR", missing)
	out, err := runChild(t, dir, []string{"train", "--input=" + filepath.Join(dir, "in"), "--output=" + filepath.Join(dir, "run")})
	if err == nil {
		t.Fatalf("train on a missing input succeeded: %s", out)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dcl train made the missing TMPDIR %s (%v): %s", missing, err, out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left beside the output: %v", entries)
	}
}
