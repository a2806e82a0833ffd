package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/safetensors"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/reproduce"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// killSeed seeds the kill points; DCL_KILL_SEED and DCL_KILL_ROUNDS change the seed and the
// number of kills per command, for a longer hunt, and DCL_KILL_RESULTS names a folder
// (relative to the repository's root) to write what the hunt found into (kill-seed-N.json, for
// docs/reliability/ and make docs).
const killSeed = 14

// TestKilledRunsRerunToTheSameOutput is fault injection by SIGKILL: each of preprocess,
// train, embed (to a folder and to one .parquet file) and reproduce runs once to completion
// (the reference), then, round after round, is started afresh in its own folder, killed
// with SIGKILL after a delay drawn (seeded) from the reference's duration, and run again as
// a user would (train: --resume when a checkpoint exists) until it completes. Reproduce is
// also killed in its report phase (the comparison, results.json, report.md, the plots and
// the history), its delay drawn from that phase's duration after the line that starts it,
// because a kill drawn from the whole run seldom lands there. Every output must then equal
// the reference's: byte for byte, except what records time (checkpoints' creation time, log
// time stamps, throughput, wall times), and no record may be lost.
func TestKilledRunsRerunToTheSameOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and re-runs dcl a dozen times")
	}
	seed, rounds := uint64(killSeed), 3
	if s := os.Getenv("DCL_KILL_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	if s := os.Getenv("DCL_KILL_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	machine := reproduce.ThisMachine() // with the load average as the hunt starts
	rng := rand.New(rand.NewPCG(seed, 0x6b696c6c))
	root := t.TempDir()
	input, config := writeKillExperiment(t, root)
	// Each command's outputs feed the next: the reference folders hold them.
	ref := func(name string) string { return filepath.Join(root, "ref-"+name, "out") }
	jobs := []killJob{
		{name: "preprocess", args: []string{"preprocess", "--dataset=idx", "--input=" + input, "--output=out",
			"--passes=3", "--shards=3", "--unit-records=32", "--size=16", "--seed=9", "--progress=off"}},
		{name: "train", args: []string{"train", "--input=" + ref("preprocess"), "--output=out", "--model=small-cnn", "--width=4",
			"--batch-size=16", "--epochs=3", "--lr=0.3", "--backend=cpu", "--checkpoint-every=3", "--keep-checkpoints=0", "--progress=off"},
			resume: func(dir string) []string {
				if ckpts, _ := filepath.Glob(filepath.Join(dir, "out", "checkpoints", "*"+trainstep.CheckpointExt)); len(ckpts) > 0 {
					return []string{"--resume"}
				}
				return nil
			}},
		{name: "embed", args: []string{"embed", "--checkpoint=" + ref("train"), "--input=" + ref("preprocess"), "--output=out",
			"--pass=-1", "--parts=4", "--batch-size=32", "--threads=1"}},
		// One file: the parts are committed in a hidden folder beside it, then concatenated.
		{name: "embed-file", args: []string{"embed", "--checkpoint=" + ref("train"), "--input=" + ref("preprocess"),
			"--output=out/" + killEmbeddingsFile, "--pass=-1", "--parts=4", "--batch-size=32", "--threads=1"}},
		{name: "reproduce", args: []string{"reproduce", "--config=" + config, "--output=out", "--progress=off"},
			phase: reportPhaseLine, eachRunRecorded: true},
	}
	var killed, finished, afterFinal, inPhase, differences int
	var lost int64
	for _, job := range jobs {
		refDir := filepath.Dir(ref(job.name))
		start := time.Now()
		out, phaseAt, err := job.run(t, refDir, 0, "")
		if err != nil {
			t.Fatalf("%s, the reference run: %v\n%s", job.name, err, out)
		}
		took := time.Since(start)
		if job.phase != "" && phaseAt < 0 {
			t.Fatalf("%s, the reference run: no line %q\n%s", job.name, job.phase, out)
		}
		want := outputDigests(t, ref(job.name))
		// Rounds killed at any time, then (for a job with a phase) rounds killed in the phase.
		phaseRounds := 0
		if job.phase != "" {
			phaseRounds = rounds
		}
		for round := range rounds + phaseRounds {
			dir := filepath.Join(root, fmt.Sprintf("%s-%d", job.name, round))
			delay, marker := time.Duration(rng.Int64N(int64(took))), ""
			if round >= rounds {
				delay, marker = time.Duration(rng.Int64N(int64(took-phaseAt))), job.phase
			}
			killedOut, reached, err := job.run(t, dir, delay, marker)
			if err == nil {
				finished++ // done before the kill: the re-run below must leave it as it is
			} else {
				killed++
				if marker != "" && reached >= 0 {
					inPhase++
				}
				checkNoPartialData(t, job.name, filepath.Join(dir, "out"))
			}
			if job.name == "train" && err != nil && finalCheckpointWritten(t, ref(job.name), filepath.Join(dir, "out")) {
				afterFinal++ // killed between the final checkpoint and summary.json: resume writes it
			}
			if err == nil && job.eachRunRecorded {
				// Run again, it would be a reproduction of its own: nothing to finish.
			} else if out, _, err := job.run(t, dir, 0, ""); err != nil {
				t.Fatalf("%s, round %d: the re-run after a kill at %s failed: %v\n%s\nthe killed run's output:\n%s", job.name, round, delay, err, out, killedOut)
			}
			got := outputDigests(t, filepath.Join(dir, "out"))
			when := fmt.Sprintf("killed after %s of %s", delay.Round(time.Millisecond), took.Round(time.Millisecond))
			if marker != "" {
				when = fmt.Sprintf("killed %s after %q (the reference ran %s more)", delay.Round(time.Millisecond), marker, (took - phaseAt).Round(time.Millisecond))
			}
			diffs := diffDigests(want, got)
			for _, d := range diffs {
				t.Errorf("%s, round %d, %s: %s", job.name, round, when, d)
			}
			if len(diffs) > 0 {
				differences++
			}
			if job.name == "preprocess" {
				lost += recordsOf(t, ref(job.name)) - recordsOf(t, filepath.Join(dir, "out"))
			}
		}
	}
	if lost != 0 {
		t.Errorf("%d records lost", lost)
	}
	if inPhase == 0 {
		t.Errorf("no reproduction was killed in its report phase")
	}
	if dir := os.Getenv("DCL_KILL_RESULTS"); dir != "" {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join("..", "..", dir) // relative to the repository's root
		}
		hunt := testfiles.KillHunt{Seed: seed, Rounds: rounds, Runs: killed + finished, Killed: killed,
			InReportPhase: inPhase, AfterFinalCheckpoint: afterFinal, Differences: differences, RecordsLost: lost,
			Machine: machine,
			Command: fmt.Sprintf("DCL_KILL_SEED=%d DCL_KILL_ROUNDS=%d go test -run TestKilledRunsRerunToTheSameOutput ./cmd/dcl", seed, rounds)}
		for _, job := range jobs {
			hunt.Jobs = append(hunt.Jobs, job.what())
		}
		if err := storage.SaveJSON(context.Background(), filepath.Join(dir, fmt.Sprintf("kill-seed-%d.json", seed)), hunt); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d: %d runs killed (%d trainings after their final checkpoint, %d reproductions in their report phase), %d finished before their kill; %d records lost",
		seed, killed, afterFinal, inPhase, finished, lost)
}

// reportPhaseLine is what reproduce logs when its stages are done and its report phase
// begins.
const reportPhaseLine = "msg=\"reporting:"

// killEmbeddingsFile is the embed-file job's output under out/.
const killEmbeddingsFile = "embeddings.parquet"

// checkNoPartialData: a killed preprocess or embed leaves a manifest only when every file
// it lists is in place (the commit writes it last), and no Parquet file that the glob
// OUT/**/*.parquet takes for data (DuckDB's semantics, hidden folders included) but whole
// files under their final names, which a kill among the commit's moves leaves.
func checkNoPartialData(t *testing.T, job, out string) {
	t.Helper()
	if job == "embed-file" {
		// The file is written under a temporary name and renamed: if it is there, it is whole.
		file := filepath.Join(out, killEmbeddingsFile)
		if _, err := os.Stat(file); err == nil {
			if _, err := embeddings.Open(context.Background(), file, 0); err != nil {
				t.Errorf("embed to one file, killed: %s is there but does not open: %v", file, err)
			}
		}
		return
	}
	manifest := map[string]string{"preprocess": shards.ManifestName, "embed": embeddings.ManifestName}[job]
	if manifest == "" {
		return
	}
	if _, err := os.Stat(filepath.Join(out, manifest)); err == nil {
		checkManifestFiles(t, job, out)
		return
	}
	for _, f := range testfiles.GlobParquet(t, out, false) {
		if err := wholeParquet(filepath.Join(out, f)); err != nil || strings.HasPrefix(f, shards.StagingDir+"/") {
			t.Errorf("%s killed before its commit wrote %s: the glob %s/**/*.parquet finds %s, not a whole file in its place (%v)", job, manifest, out, f, err)
		}
	}
}

// checkManifestFiles: every file the manifest of a killed preprocess or embed lists is in
// place, with its size.
func checkManifestFiles(t *testing.T, job, out string) {
	t.Helper()
	ctx := context.Background()
	if job == "embed" {
		r, err := embeddings.Open(ctx, out, 0)
		if err != nil {
			t.Errorf("embed killed after its commit wrote %s: %v", embeddings.ManifestName, err)
			return
		}
		r.Close()
		return
	}
	m, err := shards.ReadManifest(ctx, out)
	if err != nil {
		t.Errorf("preprocess killed after its commit wrote %s: %v", shards.ManifestName, err)
		return
	}
	for _, s := range m.Shards {
		if st, err := os.Stat(filepath.Join(out, filepath.FromSlash(s.Path))); err != nil || st.Size() != s.Bytes {
			t.Errorf("preprocess killed after its commit wrote %s: shard %s is not in place with its %d bytes (%v)", shards.ManifestName, s.Path, s.Bytes, err)
		}
	}
}

// wholeParquet opens p as a Parquet file: its footer is there, so it was written to its end.
func wholeParquet(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	_, err = parquet.OpenFile(f, st.Size())
	return err
}

// writeKillExperiment writes under root the IDX data killConfig reads (192 training and 64
// test images) and the config itself, and returns the data's folder and the config's path.
func writeKillExperiment(t *testing.T, root string) (input, config string) {
	t.Helper()
	input = filepath.Join(root, "idx")
	pipelinetest.WriteIDX(t, input, "train", 192, true)
	pipelinetest.WriteIDX(t, input, "test", 64, true)
	config = filepath.Join(root, "tiny.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, killConfig, input), 0o644); err != nil {
		t.Fatal(err)
	}
	return input, config
}

// killConfig is a whole experiment in a few seconds; %s is the IDX folder.
const killConfig = `
name: killed
dataset: {name: idx, input: %s, image_size: 16}
preprocess: {augment: simclr-cifar, passes: 2, seed: 7}
train:
  defaults: {model: small-cnn, width: 4, epochs: 2, batch_size: 16, temperature: 0.2, lr: 0.3, backend: cpu, checkpoint_every: 3}
  runs:
    - {name: dcl, loss: dcl}
evaluate:
  knn: {k: 10, temperature: 0.1}
  linear: {epochs: 3, lr: 1, batch_size: 32}
  npc: {batch_sizes: [8, 16], samples: 2}
`

// what says what the job runs, for the hunt's record.
func (j killJob) what() string {
	what := "dcl " + j.args[0]
	for _, a := range j.args {
		if strings.HasPrefix(a, "--output=") && strings.HasSuffix(a, ".parquet") {
			what += " to one .parquet file"
		}
	}
	if j.phase != "" {
		what += " (also in its report phase)"
	}
	return what
}

type killJob struct {
	name   string
	args   []string
	resume func(dir string) []string // extra arguments of a re-run in dir
	// phase is a line that starts a phase of the run to aim some kills at ("": none).
	phase string
	// eachRunRecorded says that every complete run adds to the output (a reproduction's
	// history entry), so that one that finished before its kill is not run again.
	eachRunRecorded bool
}

// run runs the job as dcl in a child process in dir (outputs in dir/out, so that the paths
// recorded in them are the same in every folder), killed with SIGKILL after kill (0: never),
// counted from the start or, with a marker, from the moment its output first holds the
// marker (no kill if it never does). It returns the output and when the output first held
// the job's phase line (-1: never).
func (j killJob) run(t *testing.T, dir string, kill time.Duration, marker string) (string, time.Duration, error) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := j.args
	if kill == 0 && j.resume != nil {
		args = append(slices.Clone(args), j.resume(dir)...)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DCL_TEST_AS_MAIN=1")
	start := time.Now()
	phaseAt := time.Duration(-1)
	var timer *time.Timer
	out := &watchedOutput{marks: map[string]func(){}}
	if j.phase != "" {
		out.marks[j.phase] = func() { phaseAt = time.Since(start) }
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if kill > 0 {
		startTimer := func() { timer = time.AfterFunc(kill, func() { cmd.Process.Kill() }) }
		if marker == "" {
			startTimer()
		} else {
			seen := out.marks[marker]
			out.marks[marker] = func() {
				if seen != nil {
					seen()
				}
				startTimer()
			}
		}
	}
	err = cmd.Wait()
	out.mu.Lock()
	defer out.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	return out.buf.String(), phaseAt, err
}

// watchedOutput is a child's output that calls marks[s] once, when the output first holds s.
type watchedOutput struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	marks map[string]func()
}

func (w *watchedOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for s, f := range w.marks {
		// The last len(p)+len(s) bytes hold any occurrence that this write completes.
		tail := w.buf.Bytes()[max(0, w.buf.Len()-len(p)-len(s)):]
		if bytes.Contains(tail, []byte(s)) {
			delete(w.marks, s)
			f()
		}
	}
	return len(p), nil
}

// timeKeys are the JSON keys whose values record when or how fast, not what (the machine
// line holds the load average when the reproduction started): also the
// history file a reproduction wrote (named by its time) and the stage ledger's counters of
// calls (a killed call and its re-run are two).
var timeKeys = map[string]bool{"time": true, "wall": true, "images_per_s": true, "created": true, "stages": true,
	"history_file": true, "seq": true, "complete_seq": true, "machine": true}

// outputDigests digests every file under dir by what it says: checkpoints by their header
// (less its creation time) and tensor bytes, JSON and JSON lines without timeKeys, every
// other file by its bytes. Reports (their lines of wall times) are left out: results.json
// holds the same figures.
func outputDigests(t *testing.T, dir string) map[string]digest {
	t.Helper()
	out := map[string]digest{}
	historyFiles := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case strings.HasSuffix(rel, ".md"):
			return nil
		case strings.HasPrefix(rel, "tensorboard/") || strings.Contains(rel, "/tensorboard/"):
			// Event files are named and stamped by wall time, and a resumed run adds one
			// (TensorBoard reads a folder's files together); TestTrainWritesTensorBoard
			// checks their values against the log.
			return nil
		case strings.HasSuffix(rel, "plots/trend.png"):
			// Its x axis is labelled with each reproduction's time (the history's rows).
			return nil
		case strings.HasPrefix(rel, "history/"):
			// One file per completed reproduction, named by its time, rows stamped with it
			// (reproduce's TestHistoryFiles checks them): count them, not their bytes.
			rel, data = fmt.Sprintf("history/#%d", historyFiles), nil
			historyFiles++
		case strings.HasSuffix(rel, trainstep.CheckpointExt):
			data = checkpointContent(t, rel, data)
		case strings.HasSuffix(rel, ".json"):
			data = withoutTimes(t, rel, data)
		case strings.HasSuffix(rel, ".jsonl"):
			var lines [][]byte
			for l := range bytes.Lines(data) {
				lines = append(lines, withoutTimes(t, rel, l))
			}
			data = bytes.Join(lines, []byte("\n"))
		}
		sum := sha256.Sum256(data)
		dg := digest{sum: hex.EncodeToString(sum[:8])}
		if strings.HasSuffix(rel, ".json") && len(data) < 1000 {
			dg.text = string(data) // small enough to show in a message
		}
		out[rel] = dg
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func withoutTimes(t *testing.T, name string, data []byte) []byte {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s is not JSON: %v", name, err)
	}
	var strip func(v any) any
	strip = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k := range x {
				if timeKeys[k] {
					delete(x, k)
				} else {
					x[k] = strip(x[k])
				}
			}
		case []any:
			for i := range x {
				x[i] = strip(x[i])
			}
		}
		return v
	}
	b, _ := json.Marshal(strip(v))
	return b
}

// checkpointContent is a checkpoint less its creation time: the rest of its header and its
// tensor bytes.
func checkpointContent(t *testing.T, name string, raw []byte) []byte {
	// The header (in the metadata) holds the time it was written, and the checksum covers it:
	// what must match is the header without times and the tensors' data.
	tensors, meta, err := safetensors.Decode(raw)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out := withoutTimes(t, name, []byte(meta["dcl.header"]))
	for _, x := range tensors {
		out = append(append(out, x.Name...), x.Data...)
	}
	return out
}

// digest is what outputDigests keeps of a file: a hash, and a small JSON file's text.
type digest struct{ sum, text string }

// diffDigests lists the files missing, extra or different in got.
func diffDigests(want, got map[string]digest) []string {
	var diffs []string
	for name, w := range want {
		switch g, ok := got[name]; {
		case !ok:
			diffs = append(diffs, name+" is missing")
		case g.sum != w.sum && w.text != "":
			diffs = append(diffs, fmt.Sprintf("%s differs: %s, want %s", name, g.text, w.text))
		case g.sum != w.sum:
			diffs = append(diffs, name+" differs")
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			diffs = append(diffs, name+" should not be there")
		}
	}
	slices.Sort(diffs)
	return diffs
}

// finalCheckpointWritten reports whether a killed training run in out got as far as the
// reference run's last checkpoint.
func finalCheckpointWritten(t *testing.T, ref, out string) bool {
	ckpts, err := filepath.Glob(filepath.Join(ref, "checkpoints", "*"+trainstep.CheckpointExt))
	if err != nil || len(ckpts) == 0 {
		t.Fatalf("the reference run has no checkpoints: %v", err)
	}
	slices.Sort(ckpts)
	_, err = os.Stat(filepath.Join(out, "checkpoints", filepath.Base(ckpts[len(ckpts)-1])))
	return err == nil
}

// recordsOf is the record count of a dataset's manifest.
func recordsOf(t *testing.T, dir string) int64 {
	m, err := shards.ReadManifest(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return m.Records
}
