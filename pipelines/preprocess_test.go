package pipelines

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"

	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// TestPreprocessCIFARWritesEveryRowAsAugmentDoes runs the pipeline on a CIFAR-10 fixture and
// checks the result row by row: every record once per pass, in the shard Place chose, in
// Place's order, with the views augment.View makes from the source pixels; counts, labels
// and metrics that add up; and a dataset that Verify accepts.
func TestPreprocessCIFARWritesEveryRowAsAugmentDoes(t *testing.T) {
	o := cifarOptions(t, 6) // 30 train records in 8 units of up to 4
	var shown bytes.Buffer
	o.Progress = progress.Options{W: &shown, Mode: progress.Lines, Interval: time.Hour}
	res := mustPreprocess(t, o)
	// The lines show what the DoFns counted, not the totals: every record read, every row written.
	for _, want := range []string{"preprocess reading: 30/30 records (100%)", "preprocess writing: 60/60 rows (100%)"} {
		if !strings.Contains(shown.String(), want) {
			t.Errorf("progress lines lack %q:\n%s", want, shown.String())
		}
	}
	m := res.Manifest
	const n = 30
	if m.Records != n || m.Rows != 2*n || len(m.Shards) != 6 || m.DeadLetters.Count != 0 {
		t.Fatalf("manifest: %d records, %d rows, %d shards, %d dead letters; want %d, %d, 6, 0",
			m.Records, m.Rows, len(m.Shards), m.DeadLetters.Count, n, 2*n)
	}
	want := PreprocessMetrics{RecordsRead: n, RecordsFetched: 2 * n, RowsWritten: 2 * n, ViewsWritten: 4 * n,
		BytesWritten: m.Bytes, ShardsWritten: 6}
	if res.Metrics != want {
		t.Errorf("metrics %+v, want %+v", res.Metrics, want)
	}
	sum := mustVerify(t, o.Output)
	wantLabels := map[int32]int64{}
	for i := range n {
		wantLabels[int32(pipelinetest.CIFAR10Label(i))] += 2
	}
	if !maps.Equal(sum.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", sum.Labels, wantLabels)
	}

	seen := map[string]int{}
	for _, s := range m.Shards {
		rows := readShardRows(t, storage.Join(o.Output, s.Path))
		var last uint64
		for i, r := range rows {
			var idx int
			if _, err := fmt.Sscanf(r.Key, "train/%06d", &idx); err != nil || int64(idx) != r.Index {
				t.Fatalf("%s row %d: key %q, index %d", s.Path, i, r.Key, r.Index)
			}
			part, order := shards.Place(o.Seed, r.Key, o.Parts)
			if part != s.Part || int(r.Pass) != s.Pass {
				t.Errorf("%s holds %s of pass %d, which Place puts in part %d", s.Path, r.Key, r.Pass, part)
			}
			if i > 0 && order < last {
				t.Errorf("%s: row %d is out of Place's order", s.Path, i)
			}
			last = order
			if int(r.Label) != pipelinetest.CIFAR10Label(idx) {
				t.Errorf("%s: label %d, want %d", r.Key, r.Label, pipelinetest.CIFAR10Label(idx))
			}
			src := pipelinetest.CIFAR10Image(idx)
			for v, got := range [][]byte{r.View1, r.View2} {
				view, err := augment.View(o.Augment, src, o.Seed, r.Key, int(r.Pass), v)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, view.Pix) {
					t.Errorf("%s pass %d view %d differs from augment.View", r.Key, r.Pass, v)
				}
			}
			seen[fmt.Sprintf("%s/%d", r.Key, r.Pass)]++
		}
	}
	if len(seen) != 2*n {
		t.Errorf("%d distinct (key, pass) rows, want %d", len(seen), 2*n)
	}
	for k, c := range seen {
		if c != 1 {
			t.Errorf("%s written %d times", k, c)
		}
	}
	if got := res.Summary(o.Output); !bytes.Contains([]byte(got), []byte("30 records → 60 rows (120 views) in 6 shards")) {
		t.Errorf("summary %q", got)
	}
}

// TestPreprocessRerunGivesTheSameBytes: the same command gives byte-identical datasets in
// two directories, and a re-run over what an interrupted run left (no manifest, a shard
// missing, temporaries planted) completes to the same bytes.
func TestPreprocessRerunGivesTheSameBytes(t *testing.T) {
	o := cifarOptions(t, 4)
	mustPreprocess(t, o)
	want := testfiles.TreeChecksums(t, o.Output)

	other := o
	other.Output = filepath.Join(t.TempDir(), "again")
	mustPreprocess(t, other)
	sameFiles(t, testfiles.TreeChecksums(t, other.Output), want)

	// What a run killed part-way leaves: no manifest, a shard missing, temporaries.
	for _, p := range []string{shards.ManifestName, "pass-001/part-00002-of-00003.parquet"} {
		if err := os.Remove(filepath.Join(o.Output, p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"pass-000/part-00001-of-00003.parquet" + storage.TempMarker + "123", "manifest.json" + storage.TempMarker + "9"} {
		testfiles.WriteFile(t, filepath.Join(o.Output, p), []byte("half a file"))
	}
	if _, err := shards.NewReader(context.Background(), o.Output, shards.ReaderOptions{BatchSize: 4}); !errors.Is(err, shards.ErrNoManifest) {
		t.Fatalf("a reader opened the interrupted run's directory: %v", err)
	}
	mustPreprocess(t, o)
	sameFiles(t, testfiles.TreeChecksums(t, o.Output), want)
	mustVerify(t, o.Output)
}

// TestPreprocessWorkerFailingPartWayLeavesNoData makes WriteParts fail in the middle of a
// shard, as a worker dying would: the run fails, nothing in the directory passes for data,
// and the same command run again completes with the bytes of an undisturbed run.
func TestPreprocessWorkerFailingPartWayLeavesNoData(t *testing.T) {
	ctx := context.Background()
	o := cifarOptions(t, 4)
	clean := o
	clean.Output = filepath.Join(t.TempDir(), "clean")
	mustPreprocess(t, clean)

	job, err := PlanPreprocess(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	job.failAfterRows = 3
	_, err = RunPreprocess(ctx, job)
	wantErrorMentions(t, err, "failing after 3 rows")
	if ok, _ := storage.Exists(ctx, filepath.Join(o.Output, shards.ManifestName)); ok {
		t.Fatal("a failed run wrote a manifest")
	}
	if _, err := shards.Verify(ctx, o.Output); !errors.Is(err, shards.ErrNoManifest) {
		t.Errorf("Verify of the failed run's directory: %v, want ErrNoManifest", err)
	}
	for p := range testfiles.TreeChecksums(t, o.Output) {
		if strings.Contains(p, storage.TempMarker) {
			t.Errorf("the failed run left a temporary: %s", p)
		}
	}
	mustPreprocess(t, o)
	sameFiles(t, testfiles.TreeChecksums(t, o.Output), testfiles.TreeChecksums(t, clean.Output))
}

// badFolder writes an image folder of 3 classes × 4 images in which one file is not an
// image at all (the reader's header check refuses it) and one is a JPEG whose scan is cut
// short (only decoding finds out).
func badFolder(t testing.TB) (dir, notImage, truncated string) {
	dir = t.TempDir()
	files := pipelinetest.WriteFolder(t, dir, []string{"cat", "dog", "eel"}, 4, 40, 30)
	notImage, truncated = files["cat"][1], files["dog"][2]
	testfiles.WriteFile(t, notImage, []byte("this is not an image"))
	testfiles.WriteFile(t, truncated, testfiles.CorruptJPEG(t))
	return dir, notImage, truncated
}

func folderOptions(t testing.TB, in string) PreprocessOptions {
	return PreprocessOptions{
		Spec:        datasets.Spec{Dataset: datasets.Folder, Input: in, Split: "train", UnitRecords: 5},
		Output:      filepath.Join(t.TempDir(), "out"),
		Augment:     preset(t, augment.SimCLRImageNet, 24),
		Passes:      2,
		Seed:        3,
		Parts:       2,
		CodeVersion: "test",
	}
}

// TestPreprocessDeadLetters: bad images become dead letters with their file and reason,
// found by the reader (a file that is not an image) or by decoding (a cut JPEG); at the
// default --max-bad-fraction=0 the run fails after writing them and without a manifest;
// allowed, the counts add up: records in = rows per pass + dead letters.
func TestPreprocessDeadLetters(t *testing.T) {
	ctx := context.Background()
	in, notImage, truncated := badFolder(t)
	o := folderOptions(t, in)

	_, err := runPreprocess(t, o)
	wantErrorMentions(t, err, "2 of 12 records", "--max-bad-fraction=0", shards.DeadLettersName, "no manifest")
	if ok, _ := storage.Exists(ctx, filepath.Join(o.Output, shards.ManifestName)); ok {
		t.Fatal("a run with too many dead letters wrote a manifest")
	}
	data, err := os.ReadFile(filepath.Join(o.Output, shards.DeadLettersName))
	if err != nil {
		t.Fatalf("the failed run did not leave its dead letters: %v", err)
	}
	for _, want := range []string{notImage, truncated, "train/cat/img0001.png", "train/dog/img0002.jpg", "not a png image", "decoding 24x24 jpeg"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("dead letters do not mention %q:\n%s", want, data)
		}
	}

	o.MaxBadFraction = 0.5
	res := mustPreprocess(t, o)
	m := res.Manifest
	if m.Records != 12 || m.Rows != 2*10 || m.DeadLetters.Count != 2 || m.DeadLetters.File != shards.DeadLettersName {
		t.Errorf("manifest: %d records, %d rows, dead letters %+v; want 12, 20, 2 in %s", m.Records, m.Rows, m.DeadLetters, shards.DeadLettersName)
	}
	if res.Metrics.DeadLetters != 2 || res.Metrics.RecordsRead != 11 {
		t.Errorf("metrics %+v: want 2 dead letters and 11 records read (one was refused by the reader)", res.Metrics)
	}
	letters, err := shards.ReadDeadLetters(ctx, o.Output, m)
	if err != nil || len(letters) != 2 {
		t.Fatalf("dead letters %v, %v", letters, err)
	}
	sum := mustVerify(t, o.Output)
	if want := map[int32]int64{0: 6, 1: 6, 2: 8}; !maps.Equal(sum.Labels, want) {
		t.Errorf("labels %v, want %v", sum.Labels, want)
	}
	// The class list travels with the shards, in the manifest and every footer, so the
	// evaluations can compare splits.
	if want := []string{"cat", "dog", "eel"}; !slices.Equal(m.Config.Classes, want) {
		t.Errorf("manifest classes %q, want %q", m.Config.Classes, want)
	}
}

// TestPreprocessRefusesAnotherDataset: an output directory that holds a dataset of another
// configuration, or of other source bytes, is refused unless Overwrite.
func TestPreprocessRefusesAnotherDataset(t *testing.T) {
	o := cifarOptions(t, 4)
	mustPreprocess(t, o)
	before := testfiles.TreeChecksums(t, o.Output)

	reseeded := o
	reseeded.Seed = 8
	_, err := runPreprocess(t, reseeded)
	var diff *shards.DifferentDatasetError
	if !errors.As(err, &diff) {
		t.Fatalf("another seed into the same directory: %v, want a DifferentDatasetError", err)
	}
	wantErrorMentions(t, err, "seed", "--overwrite")
	sameFiles(t, testfiles.TreeChecksums(t, o.Output), before)

	// Same flags, other bytes: only the pipeline, which hashes the input, can tell.
	f := filepath.Join(o.Spec.Input, "data_batch_3.bin")
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	data[100]++
	testfiles.WriteFile(t, f, data)
	_, err = runPreprocess(t, o)
	wantErrorMentions(t, err, "different dataset", "source_checksum", "--overwrite")
	sameFiles(t, testfiles.TreeChecksums(t, o.Output), before)

	reseeded.Overwrite = true
	mustPreprocess(t, reseeded)
	mustVerify(t, o.Output)
}

func TestPreprocessEmptyGlobIsAClearError(t *testing.T) {
	o := cifarOptions(t, 1)
	o.Spec.Input = filepath.Join(t.TempDir(), "data_batch_*.bin")
	_, err := runPreprocess(t, o)
	wantErrorMentions(t, err, o.Spec.Input, "matches no files")
}

// TestPreprocessLimitKeepsTheFirstRecords: --limit keeps the records with the smallest
// indices, across files and units.
func TestPreprocessLimitKeepsTheFirstRecords(t *testing.T) {
	o := cifarOptions(t, 6)
	o.Limit, o.Passes = 13, 1
	res := mustPreprocess(t, o)
	if res.Manifest.Records != 13 {
		t.Fatalf("%d records, want 13", res.Manifest.Records)
	}
	var keys []string
	for _, r := range readAllRows(t, o.Output) {
		keys = append(keys, r.Key)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if want := fmt.Sprintf("train/%06d", i); k != want {
			t.Fatalf("keys %v: want train/000000 … train/000012", keys)
		}
	}

	// More shards than records: the empty ones are written too.
	o.Limit, o.Parts, o.Output = 2, 8, filepath.Join(t.TempDir(), "few")
	mustPreprocess(t, o)
	if sum := mustVerify(t, o.Output); sum.Shards != 8 || sum.Rows != 2 {
		t.Errorf("2 records in 8 shards: %+v", sum)
	}
}

// TestPreprocessEvaluationShards: preset none writes one centred view per image with its
// label; for 32×32 CIFAR images at size 32 the view is the image itself.
func TestPreprocessEvaluationShards(t *testing.T) {
	o := cifarOptions(t, 3)
	o.Spec.Split = "test"
	o.Augment = preset(t, augment.None, 32)
	o.Passes, o.Parts = 1, 2
	res := mustPreprocess(t, o)
	if res.Manifest.Config.Views != 1 || res.Manifest.Rows != 3 {
		t.Fatalf("config %+v, %d rows", res.Manifest.Config, res.Manifest.Rows)
	}
	for _, r := range readAllRows(t, o.Output) {
		var idx int
		fmt.Sscanf(r.Key, "test/%06d", &idx)
		want := pipelinetest.CIFAR10Image(15 + idx) // the fixture numbers test records after 5×3 train records
		if len(r.View2) != 0 || !bytes.Equal(r.View1, want.Pix) || int(r.Label) != pipelinetest.CIFAR10Label(15+idx) {
			t.Errorf("%s: evaluation view or label is not the source's", r.Key)
		}
	}
	o.Passes = 2
	_, err := runPreprocess(t, o)
	wantErrorMentions(t, err, "one pass")
}

// TestPreprocessIDXGzippedOrNotGivesTheSameShards: the same images in plain and gzipped IDX
// files are the same dataset, down to the bytes of the shards; and each row's views are
// augment's views of the source image.
func TestPreprocessIDXGzippedOrNotGivesTheSameShards(t *testing.T) {
	var outs []string
	for _, zipped := range []bool{false, true} {
		in := t.TempDir()
		pipelinetest.WriteIDX(t, in, "train", 50, zipped)
		o := PreprocessOptions{
			Spec:   datasets.Spec{Dataset: datasets.IDX, Input: in, UnitRecords: 8},
			Output: filepath.Join(t.TempDir(), "out"), Augment: preset(t, augment.SimCLRCIFAR, 28),
			Passes: 2, Seed: 5, Parts: 3, CodeVersion: "test",
		}
		res := mustPreprocess(t, o)
		if c := res.Manifest.Config; c.Channels != 1 || c.Encoding != shards.Raw || c.Height != 28 {
			t.Errorf("config %+v: want 1 channel, raw, 28 px", c)
		}
		mustVerify(t, o.Output)
		outs = append(outs, o.Output)
	}
	// The manifests differ only in the files they name as sources.
	got, want := testfiles.TreeChecksums(t, outs[1]), testfiles.TreeChecksums(t, outs[0])
	delete(got, shards.ManifestName)
	delete(want, shards.ManifestName)
	sameFiles(t, got, want)
	var ms []*shards.Manifest
	for _, out := range outs {
		m, err := shards.ReadManifest(t.Context(), out)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Config.Sources) != 1 || !strings.HasPrefix(storage.Base(m.Config.Sources[0].Name), "train-images-idx3-ubyte") {
			t.Errorf("sources %v: want the images file", m.Config.Sources)
		}
		m.Config.Sources = nil
		ms = append(ms, m)
	}
	a, _ := ms[0].Marshal()
	b, _ := ms[1].Marshal()
	if !bytes.Equal(a, b) {
		t.Errorf("the manifests differ in more than their sources:\n%s\n%s", a, b)
	}
}

// TestPreprocessImageNetTars reads ImageNet-100 from per-class tars (members re-read by
// byte range), with a corrupt member as a dead letter that names the tar and the member.
func TestPreprocessImageNetTars(t *testing.T) {
	in := t.TempDir()
	synsets := datasets.ImageNet100Synsets()
	var badTar string
	for c, syn := range synsets {
		members := []testfiles.TarMember{
			{Name: syn + "_1.JPEG", Data: testfiles.JPEG(t, 20, 16, c)},
			{Name: syn + "_2.JPEG", Data: testfiles.JPEG(t, 18, 22, c+500)},
		}
		if c == 7 {
			members[1].Data = testfiles.CorruptJPEG(t)
			badTar = filepath.Join(in, syn+".tar")
		}
		testfiles.WriteFile(t, filepath.Join(in, syn+".tar"), testfiles.Tar(t, members))
	}
	o := PreprocessOptions{
		Spec:   datasets.Spec{Dataset: datasets.ImageNet100, Input: in},
		Output: filepath.Join(t.TempDir(), "out"), Augment: preset(t, augment.SimCLRImageNet, 16),
		Passes: 1, Seed: 1, Parts: 4, MaxBadFraction: 0.01, CodeVersion: "test",
	}
	res := mustPreprocess(t, o)
	m := res.Manifest
	if m.Records != 200 || m.Rows != 199 || m.DeadLetters.Count != 1 {
		t.Fatalf("manifest: %d records, %d rows, %d dead letters; want 200, 199, 1", m.Records, m.Rows, m.DeadLetters.Count)
	}
	letters, err := shards.ReadDeadLetters(context.Background(), o.Output, m)
	if err != nil {
		t.Fatal(err)
	}
	if l := letters[0]; l.Source != badTar || l.Position <= 0 || !strings.HasSuffix(l.Key, "_2.JPEG") {
		t.Errorf("dead letter %+v: want the tar %s, the member's offset and key", l, badTar)
	}
	sum := mustVerify(t, o.Output)
	if len(sum.Labels) != 100 || sum.Labels[7] != 1 || sum.Labels[0] != 2 {
		t.Errorf("labels %v: want 2 of every class but class 7's 1", sum.Labels)
	}

	// The same tars inside ILSVRC2012_img_train.tar, read in place: the same records, so
	// the same shards; the dead letter names the outer tar, the member's offset in it and
	// its key.
	var members []testfiles.TarMember
	for _, syn := range synsets {
		data, err := os.ReadFile(filepath.Join(in, syn+".tar"))
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, testfiles.TarMember{Name: syn + ".tar", Data: data})
	}
	outer := filepath.Join(t.TempDir(), "ILSVRC2012_img_train.tar")
	testfiles.WriteFile(t, outer, testfiles.Tar(t, members))
	nested := o
	nested.Spec.Input, nested.Output = outer, filepath.Join(t.TempDir(), "nested")
	res = mustPreprocess(t, nested)
	for _, s := range m.Shards {
		if got := res.Manifest.Shards[slices.IndexFunc(res.Manifest.Shards, func(x shards.ShardInfo) bool { return x.Path == s.Path })]; got.SHA256 != s.SHA256 {
			t.Errorf("%s from the outer tar differs from the one from the class tars", s.Path)
		}
	}
	letters, err = shards.ReadDeadLetters(context.Background(), nested.Output, res.Manifest)
	if err != nil || len(letters) != 1 || letters[0].Source != outer || letters[0].Position <= 0 || !strings.HasSuffix(letters[0].Key, synsets[7]+"_2.JPEG") {
		t.Errorf("dead letters from the outer tar: %+v, %v", letters, err)
	}

	o.Limit = 10
	_, err = runPreprocess(t, o)
	wantErrorMentions(t, err, "--limit", "tars")
}

// TestPreprocessImageNetValFolder reads a flat validation folder labelled by a labels file:
// records are re-read by their path.
func TestPreprocessImageNetValFolder(t *testing.T) {
	in := t.TempDir()
	synsets := datasets.ImageNet100Synsets()
	var labels strings.Builder
	for i := range 6 {
		name := fmt.Sprintf("ILSVRC2012_val_%08d.JPEG", i+1)
		testfiles.WriteFile(t, filepath.Join(in, name), testfiles.JPEG(t, 30, 20, i))
		fmt.Fprintf(&labels, "%s %s\n", name, synsets[i*10])
	}
	labelsFile := filepath.Join(t.TempDir(), "val.txt")
	testfiles.WriteFile(t, labelsFile, []byte(labels.String()))
	o := PreprocessOptions{
		Spec:   datasets.Spec{Dataset: datasets.ImageNet100, Input: in, Split: "val", LabelsFile: labelsFile, UnitRecords: 4},
		Output: filepath.Join(t.TempDir(), "out"), Augment: preset(t, augment.None, 16),
		Passes: 1, Seed: 1, Parts: 2, CodeVersion: "test",
	}
	mustPreprocess(t, o)
	sum := mustVerify(t, o.Output)
	if want := map[int32]int64{0: 1, 10: 1, 20: 1, 30: 1, 40: 1, 50: 1}; !maps.Equal(sum.Labels, want) {
		t.Errorf("labels %v, want %v", sum.Labels, want)
	}
}

// TestPreprocessSTL10TrainPlusUnlabeled: the paper's pretraining split, two files of
// different parts, unlabelled rows with label -1, every view as augment makes it.
func TestPreprocessSTL10TrainPlusUnlabeled(t *testing.T) {
	in := t.TempDir()
	pipelinetest.WriteSTL10(t, in, 5, 2, 7)
	o := PreprocessOptions{
		Spec:   datasets.Spec{Dataset: datasets.STL10, Input: in, Split: "train+unlabeled", UnitRecords: 3},
		Output: filepath.Join(t.TempDir(), "out"), Augment: preset(t, augment.SimCLRCIFAR, 96),
		Passes: 1, Seed: 9, Parts: 2, CodeVersion: "test",
	}
	mustPreprocess(t, o)
	sum := mustVerify(t, o.Output)
	if sum.Rows != 12 || sum.Labels[-1] != 7 {
		t.Fatalf("%d rows, labels %v; want 12 rows, 7 unlabelled", sum.Rows, sum.Labels)
	}
	for _, r := range readAllRows(t, o.Output) {
		part, num, _ := strings.Cut(r.Key, "/")
		i, err := strconv.Atoi(num)
		if err != nil {
			t.Fatalf("key %q", r.Key)
		}
		wantLabel := -1
		if part == "train" {
			wantLabel = pipelinetest.STL10Label(i)
		}
		view, err := augment.View(o.Augment, pipelinetest.STL10Image(part, i), o.Seed, r.Key, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if int(r.Label) != wantLabel || !bytes.Equal(r.View2, view.Pix) {
			t.Errorf("%s: label %d (want %d), or view 2 differs from augment's", r.Key, r.Label, wantLabel)
		}
	}
}
