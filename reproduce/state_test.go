package reproduce

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/mutate"
)

// A reproduction stopped on one machine continues on another from its saved state alone (no
// data, checkpoints or embeddings): the data are made again and found identical, the run
// that was trained and evaluated is neither trained nor embedded again, the run that was
// stopped is trained from its start, and every figure is the uninterrupted reproduction's.
// The runs train one after another (pack: off), so that one is complete when the other stops.
func TestStateContinuesOnAnotherMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three reproductions")
	}
	input := t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	whole, err := Run(ctx, parseTiny(t, input, packOff), Options{Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}

	first := t.TempDir()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Stopped in the second run's training (the first is trained and evaluated by then).
	stderr := &cancelAtNth{marker: `"step":10,`, n: 2, cancel: cancel}
	if _, err := Run(cctx, parseTiny(t, input, packOff), Options{Out: first, Stderr: stderr, TrainLog: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped reproduction returned %v, want context.Canceled", err)
	}
	var state bytes.Buffer
	if err := SaveState(ctx, parseTiny(t, input, packOff), first, &state); err != nil {
		t.Fatal(err)
	}
	names := stateEntries(t, state.Bytes())
	for _, want := range []string{LedgerName, "runs/infonce/summary.json", "runs/infonce/knn.json", "runs/infonce/linear.json", "runs/infonce/npc/npc.json", "runs/dcl/run.json"} {
		if !names[want] {
			t.Errorf("the state lacks %s (it holds %v)", want, names)
		}
	}
	for n := range names {
		if strings.HasPrefix(n, DataDir+"/") || strings.Contains(n, "/checkpoints/") || strings.Contains(n, "/embeddings/") || strings.HasPrefix(n, "runs/dcl/") && n != "runs/dcl/run.json" {
			t.Errorf("the state carries %s", n)
		}
	}

	second := t.TempDir()
	if err := RestoreState(ctx, second, bytes.NewReader(state.Bytes()), "state.tgz"); err != nil {
		t.Fatal(err)
	}
	if err := RestoreState(ctx, second, bytes.NewReader(state.Bytes()), "state.tgz"); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("restoring over a reproduction: %v, want %v", err, ErrNotEmpty)
	}
	res, err := Run(ctx, parseTiny(t, input, packOff), Options{Out: second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range whole.Runs {
		a, b := whole.Runs[i], res.Runs[i]
		if a.Train.Loss != b.Train.Loss || a.KNN.Top1 != b.KNN.Top1 || a.Linear.Top1 != b.Linear.Top1 || a.NPC.Stats[0].Mean != b.NPC.Stats[0].Mean {
			t.Errorf("run %s continued elsewhere: loss %v kNN %v linear %v; uninterrupted %v, %v, %v", a.Config.Name,
				b.Train.Loss, b.KNN.Top1, b.Linear.Top1, a.Train.Loss, a.KNN.Top1, a.Linear.Top1)
		}
	}
	stages := map[string]StageRecord{}
	for _, s := range res.Stages {
		stages[s.Name] = s
	}
	for name, want := range map[string]string{
		"preprocess pretrain":   "made again, identical",
		"train infonce":         "skipped",
		"embed infonce":         "skipped", // one stage embeds every set an encoder's evaluations read
		"knn infonce":           "skipped",
		"train dcl":             "ran",
		"embed raw-pixels test": "ran",
	} {
		s, ok := stages[name]
		got := "ran"
		switch {
		case !ok:
			got = "absent"
		case s.Skipped:
			got = "skipped"
		case strings.Contains(s.Reason, "made again, identical"):
			got = "made again, identical"
		}
		if got != want {
			t.Errorf("stage %s: %s (%+v), want %s", name, got, s, want)
		}
	}
}

// stateEntries lists a state's file names.
func stateEntries(t *testing.T, state []byte) map[string]bool {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(state))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names[h.Name] = true
	}
	return names
}

// A state whose entries leave the run directory, are not files, are files no state holds,
// or lack the ledger is refused, naming the state and the entry; nothing of it is left in
// the run directory, however many good entries came before the bad one.
func TestRestoreStateRefusesBadArchives(t *testing.T) {
	archive := func(entries ...tar.Header) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		tw := tar.NewWriter(zw)
		for _, h := range entries {
			tw.WriteHeader(&h)
			if h.Typeflag == tar.TypeReg {
				tw.Write(make([]byte, h.Size))
			}
		}
		tw.Close()
		zw.Close()
		return b.Bytes()
	}
	file := func(name string) tar.Header {
		return tar.Header{Name: name, Typeflag: tar.TypeReg, Size: 2, Mode: 0o644}
	}
	tests := []struct {
		name string
		give []byte
		want string
	}{
		{"outside", archive(file("../escape.json"), file(LedgerName)), `entry "../escape.json" is not a file inside the run directory`},
		{"absolute", archive(file("/etc/x"), file(LedgerName)), `entry "/etc/x"`},
		{"a link", archive(tar.Header{Name: "runs/x", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, file(LedgerName)), `entry "runs/x"`},
		{"no ledger", archive(file("results.json")), "has no stages.json"},
		{"not gzip", []byte("plain text"), "is not a gzipped state"},
		{"a bad entry after good ones", archive(file("results.json"), file("history/a.parquet"), file("../escape.json"), file(LedgerName)), `entry "../escape.json"`},
		{"a file no state holds", archive(file("results.json"), file("runs/x/run.sh"), file(LedgerName)), `entry "runs/x/run.sh" is no file a state holds`},
		{"a checkpoint", archive(file("runs/x/checkpoints/step-000000001.safetensors"), file(LedgerName)), "is no file a state holds"},
		{"an entry twice", archive(file("results.json"), file("results.json"), file(LedgerName)), `entry "results.json" is given twice`},
		{"cut short", archive(file("results.json"), file(LedgerName))[:40], "s.tgz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := t.TempDir()
			err := RestoreState(context.Background(), out, bytes.NewReader(tt.give), "s.tgz")
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "s.tgz") {
				t.Errorf("RestoreState = %v, want an error naming s.tgz and %q", err, tt.want)
			}
			if left, _ := os.ReadDir(out); len(left) != 0 {
				t.Errorf("a refused state left %v in the run directory", left)
			}
		})
	}
}

// Data removed after a complete reproduction (to save disk) are made again by the next one;
// when the input changed meanwhile they come out different, and everything computed from them
// is redone.
func TestRemovedDataMadeAgainFromAnotherInputRedoesTheRuns(t *testing.T) {
	input, out := t.TempDir(), t.TempDir()
	writeBarsIDX(t, input)
	oneRun := func(s string) string {
		s = strings.Replace(s, "    - {name: infonce, loss: infonce}\n", "", 1)
		s = strings.Replace(s, "  npc: {batch_sizes: [8, 16], samples: 2}\n", "", 1)
		return strings.Replace(s, "  baselines: [raw-pixels, random-init]\n", "", 1)
	}
	ctx := context.Background()
	if _, err := Run(ctx, parseTiny(t, input, oneRun), Options{Out: out}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(out, DataDir)); err != nil {
		t.Fatal(err)
	}
	// Other labels: other shards.
	writeBarsIDXLabelled(t, input, func(_ string, i int) int { return (i / 2) % 2 })
	res, err := Run(ctx, parseTiny(t, input, oneRun), Options{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Stages {
		if strings.HasPrefix(s.Name, "preprocess") && !strings.Contains(s.Reason, "it differs from the one") {
			t.Errorf("stage %s: %+v, want it made again and found different", s.Name, s)
		}
		if s.Name == "train dcl" && (s.Skipped || !strings.Contains(s.Reason, "depends on preprocess pretrain")) {
			t.Errorf("stage %s: %+v, want it redone from the new data", s.Name, s)
		}
	}
}

// Every test run restores a second's worth of mutated states (the tar inside the gzip): each
// is refused, leaving nothing in the run directory, or restored, leaving the ledger and only
// files a state holds.
func TestMutatedStatesUnpackAllOrNothing(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, name := range []string{ResultsName, "history/20260101T000000Z.parquet", "runs/dcl/run.json", "runs/dcl/npc/npc.json", "baselines/raw-pixels/knn.json", LedgerName} {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: 3, Mode: 0o644})
		tw.Write([]byte("{}\n"))
	}
	tw.Close()
	base := t.TempDir()
	n := 0
	mutate.Run(t, [][]byte{b.Bytes()}, func(data []byte) error {
		n++
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(data)
		zw.Close()
		out := filepath.Join(base, strconv.Itoa(n))
		defer os.RemoveAll(out)
		err := RestoreState(context.Background(), out, &z, "s.tgz")
		var files []string
		filepath.WalkDir(out, func(p string, d os.DirEntry, werr error) error {
			if werr == nil && !d.IsDir() {
				rel, _ := filepath.Rel(out, p)
				files = append(files, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			if len(files) > 0 {
				return fmt.Errorf("refused (%v), and left %q", err, files)
			}
			return nil
		}
		if !slices.Contains(files, LedgerName) {
			return fmt.Errorf("restored without a ledger: %q", files)
		}
		for _, f := range files {
			if !isStateFile(f) {
				return fmt.Errorf("restored %q, no file a state holds", f)
			}
		}
		return nil
	})
}
