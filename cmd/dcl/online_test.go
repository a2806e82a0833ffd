package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/fashionmnist"
)

// TestTrainOnBaseShardsEqualsStoredPasses: a short `dcl train` on Fashion-MNIST base shards
// (`dcl preprocess --views=online`) logs, step for step, the losses, NPC multipliers and
// learning rates of the same run on the equivalent stored passes (`--passes=2`, one per
// epoch): the trainer sees the same batches, in the same order, with the same view bytes.
// 6,000 images in one shard make row groups of 2,676 view pairs: base shards must cut theirs
// at the same rows, not where their own (half as large) rows would fill the bytes.
func TestTrainOnBaseShardsEqualsStoredPasses(t *testing.T) {
	dir := fashionmnist.Dir(t)
	tmp := t.TempDir()
	common := []string{"--dataset=idx", "--input=" + dir, "--limit=6000", "--seed=4", "--shards=1"}
	stored, base := filepath.Join(tmp, "stored"), filepath.Join(tmp, "base")
	for _, args := range [][]string{
		append([]string{"--output=" + stored, "--passes=2"}, common...),
		append([]string{"--output=" + base, "--views=online"}, common...),
	} {
		if code, _, stderr := runPreprocessInProcess(t, args...); code != exitOK {
			t.Fatalf("dcl preprocess %v exited %d:\n%s", args, code, stderr)
		}
	}
	losses := map[string][]string{}
	for _, data := range []string{stored, base} {
		out := filepath.Join(tmp, "run-"+filepath.Base(data))
		code, _, stderr := runDCL("train", "--input", data, "--output", out, "--model", "small-cnn", "--width", "4",
			"--batch-size", "64", "--epochs", "2", "--lr", "0.3", "--backend", "cpu", "--seed", "2", "--checkpoint-every", "1000")
		if code != exitOK {
			t.Fatalf("dcl train on %s exited %d:\n%s", data, code, stderr)
		}
		losses[data] = stepScalars(t, filepath.Join(out, "train.jsonl"))
	}
	got, want := losses[base], losses[stored]
	if len(want) != 2*(6000/64) {
		t.Fatalf("the run on stored passes logged %d steps, want %d", len(want), 2*(6000/64))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("step %d: base shards %s, stored passes %s (of %d and %d steps)", i+1, got[i], want[i], len(got), len(want))
			}
		}
		t.Fatalf("base shards logged %d steps, stored passes %d", len(got), len(want))
	}
}

// stepScalars returns "epoch loss mean_q lr" of every step line of a train.jsonl.
func stepScalars(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		if _, ok := line["loss"]; !ok {
			continue
		}
		out = append(out, string(line["epoch"])+" "+string(line["loss"])+" "+string(line["mean_q"])+" "+string(line["lr"]))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
