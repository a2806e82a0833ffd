package trainstep

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/safetensors"
)

// writeFirstFormat rewrites the checkpoint at path in the first format (DCLCKPT1), as the
// versions before safetensors wrote it, under the same name with LegacyCheckpointExt, and
// removes the original.
func writeFirstFormat(t *testing.T, path string) string {
	t.Helper()
	c, err := ReadCheckpoint(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	h := c.Header
	h.FormatVersion = legacyVersion
	var data []byte
	h.Variables = nil
	for _, v := range c.Header.Variables {
		raw := c.raw(v)
		v.Offset, v.Bytes = int64(len(data)), int64(len(raw))
		data = append(data, raw...)
		h.Variables = append(h.Variables, v)
	}
	header, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString(legacyMagic)
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.Write(header)
	b.Write(data)
	binary.Write(&b, binary.LittleEndian, crc32.Checksum(b.Bytes(), crcTable))
	legacy := strings.TrimSuffix(path, CheckpointExt) + LegacyCheckpointExt
	if err := os.WriteFile(legacy, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	return legacy
}

// TestCheckpointIsSafetensors: a checkpoint is a safetensors file as the specification has
// it, read here by the format's own rules (not ReadCheckpoint): one tensor per variable,
// optimiser state included, named by its path; the run's configuration in the metadata; and
// a SHA-256 of that header and the data that the file's bytes reproduce.
func TestCheckpointIsSafetensors(t *testing.T) {
	pairs := syntheticPairs(4, 8, 2, 4, 4, 1)
	out := t.TempDir()
	sum, err := Train(context.Background(), testStepConfig(MLP), testRunConfig(t, out), quietOptions(t, mustMemorySource(t, pairs)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(sum.Checkpoint, ".safetensors") {
		t.Errorf("checkpoint %s: want a .safetensors file", sum.Checkpoint)
	}
	raw, err := os.ReadFile(sum.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	tensors, meta, err := safetensors.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]safetensors.Tensor{}
	for _, x := range tensors {
		names[x.Name] = x
	}
	for _, want := range []string{"model/backbone/fc1/weights", "model/backbone/bn1/running_mean", "model/projector/fc2/bias",
		"optimizer/momentum/model/backbone/fc1/weights"} {
		if _, ok := names[want]; !ok {
			t.Errorf("no tensor %s among %d", want, len(tensors))
		}
	}
	if meta["dcl.format"] != "dcl-checkpoint" {
		t.Errorf("metadata dcl.format = %q", meta["dcl.format"])
	}
	var h struct {
		FormatVersion int `json:"format_version"`
		Step          struct {
			Model struct{ Name string } `json:"model"`
		} `json:"step_config"`
		Run struct {
			BatchSize int `json:"batch_size"`
		} `json:"run"`
		State struct {
			StepsDone int `json:"steps_done"`
		} `json:"state"`
	}
	if err := json.Unmarshal([]byte(meta["dcl.header"]), &h); err != nil {
		t.Fatalf("metadata dcl.header: %v", err)
	}
	if h.FormatVersion != 2 || h.Step.Model.Name != MLP || h.Run.BatchSize != 4 || h.State.StepsDone != sum.StepsDone {
		t.Errorf("header %+v: want format 2, the mlp, batch 4, %d steps", h, sum.StepsDone)
	}
	n := binary.LittleEndian.Uint64(raw)
	digest := sha256.Sum256(append([]byte(meta["dcl.header"]), raw[8+n:]...))
	if got := hex.EncodeToString(digest[:]); got != meta["dcl.sha256"] {
		t.Errorf("dcl.sha256 = %s; the header and data give %s", meta["dcl.sha256"], got)
	}
}

// TestResumeFromFirstFormat: a run stopped with a checkpoint of the first format (as an
// earlier version wrote it) resumes to exactly the weights of a run that never stopped, and
// writes its later checkpoints as safetensors; export and the header reader take the old file.
func TestResumeFromFirstFormat(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(1, 22, 3, 6, 6, 1))
	whole, out, run := stoppedRun(t, testStepConfig(MLP), src)
	paths, _, err := ListCheckpoints(context.Background(), out)
	if err != nil || len(paths) != 1 {
		t.Fatalf("checkpoints %v, %v: want the stopped run's one", paths, err)
	}
	legacy := writeFirstFormat(t, paths[0])
	if h, err := ReadCheckpointHeader(context.Background(), legacy); err != nil || h.State.StepsDone != 2 {
		t.Fatalf("header of the first-format file: %+v, %v", h, err)
	}
	if _, _, err := ExportTorch(context.Background(), out, true); err != nil {
		t.Errorf("export of a first-format checkpoint: %v", err)
	}
	opts := quietOptions(t, src)
	opts.Resume = out
	resumed, err := Train(context.Background(), testStepConfig(MLP), run, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(resumed.Checkpoint, CheckpointExt) {
		t.Errorf("the resumed run wrote %s: want safetensors", resumed.Checkpoint)
	}
	sameBytes(t, variableBytes(t, whole.Checkpoint), variableBytes(t, resumed.Checkpoint))
}

// TestListCheckpointsBothFormats: both formats are listed by step, a safetensors file after a
// first-format one of the same step, and other files are not.
func TestListCheckpointsBothFormats(t *testing.T) {
	out := t.TempDir()
	dir := filepath.Join(out, CheckpointDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"step-000000003.dclckpt", "step-000000012.safetensors", "step-000000012.dclckpt", "step-000000007.safetensors", "step-x.safetensors", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	paths, steps, err := ListCheckpoints(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	if got, want := strings.Join(names, " "), "step-000000003.dclckpt step-000000007.safetensors step-000000012.dclckpt step-000000012.safetensors"; got != want {
		t.Errorf("listed %s\nwant   %s (steps %v)", got, want, steps)
	}
}
