package trainstep

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/safetensors"
)

// forgeCheckpoint rewrites the checkpoint at path as someone who knows the format would: the
// header edited by header, a tensor's data by data (either may be nil), and the checksum
// computed again, so that only the reader's checks of what the file says can refuse it.
func forgeCheckpoint(t *testing.T, path string, header func(string) string, data func(name string, b []byte)) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tensors, meta, err := safetensors.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if header != nil {
		meta[metaHeader] = header(meta[metaHeader])
	}
	for i := range tensors {
		tensors[i].Data = append([]byte{}, tensors[i].Data...)
		if data != nil {
			data(tensors[i].Name, tensors[i].Data)
		}
	}
	out, err := safetensors.Encode(tensors, meta)
	if err != nil {
		t.Fatal(err)
	}
	start := 8 + binary.LittleEndian.Uint64(out)
	sum := sha256.New()
	sum.Write([]byte(meta[metaHeader]))
	sum.Write(out[start:])
	meta[metaSHA256] = hex.EncodeToString(sum.Sum(nil))
	if out, err = safetensors.Encode(tensors, meta); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestForgedCheckpointsAreRefused: a checkpoint whose checksum was computed again over an
// impossible state (steps beyond its run, a position no step count reaches, negative counts,
// a key given twice) or NaN weights is refused by every reader: resume, embed and export.
func TestForgedCheckpointsAreRefused(t *testing.T) {
	ctx := context.Background()
	cfg := testStepConfig(SmallCNN)
	src := mustMemorySource(t, syntheticPairs(1, 16, 2, 8, 8, 1))
	_, out, run := stoppedRun(t, cfg, src) // 4 steps an epoch, 2 epochs; stopped after 2 steps
	paths, _, err := ListCheckpoints(ctx, out)
	if err != nil || len(paths) != 1 {
		t.Fatalf("checkpoints %v, %v", paths, err)
	}
	pristine, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	replace := func(old, new string) func(string) string {
		return func(h string) string {
			if !strings.Contains(h, old) {
				t.Fatalf("the header has no %s: %s", old, h)
			}
			return strings.Replace(h, old, new, 1)
		}
	}
	tests := []struct {
		name   string
		header func(string) string
		data   func(string, []byte)
		want   string
		// resumeOnly: only a reader that knows the run's data can tell.
		resumeOnly bool
	}{
		{"steps beyond the run", replace(`"steps_done":2`, `"steps_done":999`), nil, "at epoch 0 batch 2 after 999 steps", false},
		{"epoch beyond the run", replace(`"epoch":0`, `"epoch":7`), nil, "at epoch 7 batch 2 of a run of 2 epochs", false},
		{"batch beyond the epoch", replace(`"batch":2`, `"batch":5`), nil, "batch 5 after 2 steps", false},
		{"a position no step count reaches", replace(`"steps_done":2`, `"steps_done":3`), nil, "at epoch 0 batch 2 after 3 steps", false},
		{"a position of another epoch length", replace(`"steps_done":2,"epoch":0,"batch":2`, `"steps_done":5,"epoch":1,"batch":2`), nil,
			"which no run on this data (4 steps an epoch) reaches", true},
		{"negative steps", replace(`"steps_done":2`, `"steps_done":-2`), nil, "may be negative", false},
		{"a key twice", replace(`"steps_done":2`, `"steps_done":2,"steps_done":2`), nil, `"steps_done" given twice`, false},
		{"NaN weights", nil, func(name string, b []byte) {
			if strings.HasPrefix(name, "model/backbone/") && strings.HasSuffix(name, "weights") {
				binary.LittleEndian.PutUint32(b, math.Float32bits(float32(math.NaN())))
			}
		}, "holds a NaN or an infinity", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(paths[0], pristine, 0o644); err != nil {
				t.Fatal(err)
			}
			forgeCheckpoint(t, paths[0], tt.header, tt.data)
			opts := quietOptions(t, src)
			opts.Resume = out
			_, err := Train(ctx, cfg, run, opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("resume: %v; want %q", err, tt.want)
			}
			if tt.resumeOnly {
				return
			}
			if _, err := LoadEncoder(ctx, newTestBackend(t), paths[0]); err == nil {
				t.Error("LoadEncoder took it")
			}
			if _, err := SaveTorch(ctx, paths[0], filepath.Join(t.TempDir(), "e.safetensors"), false); err == nil {
				t.Error("export took it")
			}
		})
	}
	// The pristine checkpoint still resumes.
	if err := os.WriteFile(paths[0], pristine, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := quietOptions(t, src)
	opts.Resume = out
	if _, err := Train(ctx, cfg, run, opts); err != nil {
		t.Errorf("the pristine checkpoint: %v", err)
	}
}

// TestKeepCheckpointsRemovesOnlyTheRunsOwn: pruning to --keep-checkpoints removes the run's
// own older checkpoints and nothing else in the folder: not another run's checkpoint under a
// name this run would give, nor files named like checkpoints.
func TestKeepCheckpointsRemovesOnlyTheRunsOwn(t *testing.T) {
	ctx := context.Background()
	cfg := testStepConfig(SmallCNN)
	src := mustMemorySource(t, syntheticPairs(1, 16, 2, 8, 8, 1))
	_, out, run := stoppedRun(t, cfg, src)
	// Another run (another seed), stopped after one step.
	other := testRunConfig(t, t.TempDir())
	other.Seed, other.MaxSteps = 99, 1
	if _, err := Train(ctx, cfg, other, quietOptions(t, src)); err != nil {
		t.Fatal(err)
	}
	otherPaths, _, err := ListCheckpoints(ctx, other.Out)
	if err != nil || len(otherPaths) != 1 {
		t.Fatal(otherPaths, err)
	}
	planted := map[string][]byte{CheckpointName(1): nil, "step-1" + CheckpointExt: []byte("not a checkpoint"), "step-0000000x1" + CheckpointExt: nil}
	if planted[CheckpointName(1)], err = os.ReadFile(otherPaths[0]); err != nil {
		t.Fatal(err)
	}
	ours, _, _ := ListCheckpoints(ctx, out)
	if planted["step-0000000x1"+CheckpointExt], err = os.ReadFile(ours[0]); err != nil {
		t.Fatal(err)
	}
	for name, data := range planted {
		if err := os.WriteFile(filepath.Join(out, CheckpointDir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := quietOptions(t, src)
	opts.Resume = ours[len(ours)-1]
	run.KeepCheckpoints = 1
	sum, err := Train(ctx, cfg, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range planted {
		if got, err := os.ReadFile(filepath.Join(out, CheckpointDir, name)); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s, which the run did not write, is gone or changed: %v", name, err)
		}
	}
	left, _, _ := ListCheckpoints(ctx, out)
	for _, p := range left {
		if _, isPlanted := planted[filepath.Base(p)]; !isPlanted && p != sum.Checkpoint {
			t.Errorf("the run's own %s was kept (--keep-checkpoints=1)", filepath.Base(p))
		}
	}
}
