package pipelines

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// onlineSource is a small input of one dataset reader.
type onlineSource struct {
	name    string
	spec    func(t *testing.T) datasets.Spec
	maxSide int
	// jpegBase stores the base images as JPEG (the published files as they are), as base
	// shards of ImageNet-sized views do, against stored passes of raw views.
	jpegBase bool
}

func onlineSources() []onlineSource {
	return []onlineSource{
		{name: "cifar10", spec: func(t *testing.T) datasets.Spec {
			in := t.TempDir()
			pipelinetest.WriteCIFAR10(t, in, 7)
			return datasets.Spec{Dataset: datasets.CIFAR10, Input: in, Split: "train", UnitRecords: 8}
		}},
		{name: "cifar100", spec: func(t *testing.T) datasets.Spec {
			in := t.TempDir()
			var b bytes.Buffer // 3074-byte records: coarse label, fine label, 32×32×3 planes
			for i := range 11 {
				b.Write([]byte{byte(i % 20), byte((i * 37) % 100)})
				b.Write(pipelinetest.CIFAR10Record(i)[1:])
			}
			testfiles.WriteFile(t, filepath.Join(in, "train.bin"), b.Bytes())
			return datasets.Spec{Dataset: datasets.CIFAR100, Input: in, Split: "train", UnitRecords: 4}
		}},
		{name: "stl10", spec: func(t *testing.T) datasets.Spec {
			in := t.TempDir()
			pipelinetest.WriteSTL10(t, in, 9, 1, 6)
			return datasets.Spec{Dataset: datasets.STL10, Input: in, Split: "train+unlabeled", UnitRecords: 8}
		}},
		{name: "idx", spec: func(t *testing.T) datasets.Spec {
			in := t.TempDir()
			pipelinetest.WriteIDX(t, in, "train", 20, true)
			return datasets.Spec{Dataset: datasets.IDX, Input: in, Split: "train", UnitRecords: 8}
		}},
		{name: "folder", spec: func(t *testing.T) datasets.Spec {
			in := t.TempDir()
			pipelinetest.WriteFolder(t, in, []string{"cat", "dog"}, 6, 50, 38) // JPEG and PNG files
			return datasets.Spec{Dataset: datasets.Folder, Input: in, Split: "train", UnitRecords: 5}
		}},
		{name: "folder-max-side", maxSide: 40, spec: func(t *testing.T) datasets.Spec {
			in := t.TempDir()
			pipelinetest.WriteFolder(t, in, []string{"cat", "dog"}, 5, 61, 44) // shrunk to 40×29
			return datasets.Spec{Dataset: datasets.Folder, Input: in, Split: "train", UnitRecords: 4}
		}},
		{name: "imagenet", spec: func(t *testing.T) datasets.Spec {
			in := t.TempDir()
			var labels strings.Builder
			synsets := []string{"n01440764", "n01443537", "n01484850"}
			for i := range 10 {
				name := fmt.Sprintf("ILSVRC2012_val_%08d.JPEG", i+1)
				data := testfiles.JPEG(t, 47+i, 35+2*i, i)
				if i%4 == 3 { // ILSVRC-2012 holds a PNG named .JPEG
					data = testfiles.PNG(t, 40, 30, i)
				}
				testfiles.WriteFile(t, filepath.Join(in, name), data)
				fmt.Fprintf(&labels, "%s %s\n", name, synsets[i%3])
			}
			lf := filepath.Join(t.TempDir(), "val.txt")
			testfiles.WriteFile(t, lf, []byte(labels.String()))
			return datasets.Spec{Dataset: datasets.ImageNet, Input: in, Split: "val", LabelsFile: lf, UnitRecords: 4}
		}},
		// ImageNet's default at 224 px: the published files kept as they are (a PNG named
		// .JPEG too), views cut from them as the stored passes cut them from the decoded files.
		{name: "imagenet-jpeg-base", jpegBase: true, spec: func(t *testing.T) datasets.Spec {
			in := t.TempDir()
			var labels strings.Builder
			for i := range 8 {
				name := fmt.Sprintf("ILSVRC2012_val_%08d.JPEG", i+1)
				data := testfiles.JPEG(t, 45+3*i, 31+i, 100+i)
				if i%4 == 1 {
					data = testfiles.PNG(t, 36, 27, i)
				}
				testfiles.WriteFile(t, filepath.Join(in, name), data)
				fmt.Fprintf(&labels, "%s n01440764\n", name)
			}
			lf := filepath.Join(t.TempDir(), "val.txt")
			testfiles.WriteFile(t, lf, []byte(labels.String()))
			return datasets.Spec{Dataset: datasets.ImageNet, Input: in, Split: "val", LabelsFile: lf, UnitRecords: 3}
		}},
		// The train archive as published, read in place: an outer tar of per-class tars whose
		// members are fetched by byte range.
		{name: "imagenet100-tar", spec: func(t *testing.T) datasets.Spec {
			in := t.TempDir()
			var classes []testfiles.TarMember
			for c, synset := range datasets.ImageNet100Synsets() { // one image a class
				var members []testfiles.TarMember
				for i := range 1 + c/99 {
					members = append(members, testfiles.TarMember{Name: fmt.Sprintf("%s_%d.JPEG", synset, i), Data: testfiles.JPEG(t, 26+c%7, 25+c%5, 10*c+i)})
				}
				classes = append(classes, testfiles.TarMember{Name: synset + ".tar", Data: testfiles.Tar(t, members)})
			}
			testfiles.WriteFile(t, filepath.Join(in, "ILSVRC2012_img_train.tar"), testfiles.Tar(t, classes))
			return datasets.Spec{Dataset: datasets.ImageNet100, Input: in, Split: "train", UnitRecords: 16}
		}},
	}
}

// TestOnlineViewsAreTheStoredPasses is the contract of base shards: for every dataset reader
// and every augmentation preset, the trainer's reader on base shards returns at epoch e
// exactly the batches (rows, order and view bytes) it returns at epoch e on the passes that
// `dcl preprocess --passes=E` stores, for every e < E, and views of an epoch past E that no
// stored pass holds.
func TestOnlineViewsAreTheStoredPasses(t *testing.T) {
	presets := augment.Presets()
	for si, src := range onlineSources() {
		for pi, name := range presets {
			if name == augment.None {
				continue
			}
			if testing.Short() && (si+pi)%len(presets) != 0 {
				continue // one preset per reader
			}
			t.Run(src.name+"/"+name, func(t *testing.T) {
				spec := src.spec(t)
				const passes = 2
				o := PreprocessOptions{Spec: spec, Augment: preset(t, name, 24), Seed: 5, Parts: 2,
					MaxSide: src.maxSide, CodeVersion: "test"}
				offline, online := o, o
				offline.Output, offline.Passes = filepath.Join(t.TempDir(), "offline"), passes
				online.Output, online.Passes, online.Online = filepath.Join(t.TempDir(), "online"), 1, true
				if src.jpegBase {
					offline.Encoding, online.Encoding = shards.Raw, shards.JPEG
				}
				mOff := mustPreprocess(t, offline).Manifest
				mOn := mustPreprocess(t, online).Manifest
				if !mOn.Config.Online || mOn.Config.Passes != 1 || mOn.Rows != mOff.Rows/passes || mOn.Records != mOff.Records {
					t.Fatalf("base shards: online %v, %d passes, %d rows of %d records; stored views: %d rows of %d records",
						mOn.Config.Online, mOn.Config.Passes, mOn.Rows, mOn.Records, mOff.Rows, mOff.Records)
				}
				mustVerify(t, online.Output)
				if src.jpegBase && !baseHolds(t, online.Output, shards.JPEG) {
					t.Fatal("base shards hold no JPEG base image: the case does not test what it names")
				}
				for epoch := range passes + 1 {
					want := readEpoch(t, offline.Output, epoch%passes)
					got := readEpoch(t, online.Output, epoch)
					if len(got) == 0 || len(got) != len(want) {
						t.Fatalf("epoch %d: %d batches online, %d stored", epoch, len(got), len(want))
					}
					for i := range got {
						same := got[i].equal(want[i])
						if epoch < passes && !same {
							t.Fatalf("epoch %d batch %d: online %s, stored %s", epoch, i, got[i], want[i])
						}
						if epoch == passes && same && i == 0 {
							t.Errorf("epoch %d repeats pass 0's views: online views are not fresh", epoch)
						}
					}
				}
			})
		}
	}
}

// baseHolds reports whether some row of the base shards in dir stores its image in enc.
func baseHolds(t *testing.T, dir string, enc shards.Encoding) bool {
	t.Helper()
	m, err := shards.ReadManifest(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range m.Shards {
		for _, row := range readShardRows(t, filepath.Join(dir, sh.Path)) {
			if row.Encoding == string(enc) {
				return true
			}
		}
	}
	return false
}

// epochBatch is what a reader returned in one batch.
type epochBatch struct {
	keys         string
	labels       []int32
	passes       []int32
	view1, view2 []byte
}

func (b epochBatch) equal(o epochBatch) bool {
	return b.keys == o.keys && fmt.Sprint(b.labels) == fmt.Sprint(o.labels) &&
		bytes.Equal(b.view1, o.view1) && bytes.Equal(b.view2, o.view2)
}

func (b epochBatch) String() string {
	return fmt.Sprintf("keys %s labels %v passes %v (%d view bytes)", b.keys, b.labels, b.passes, len(b.view1))
}

func readEpoch(t *testing.T, dir string, epoch int) []epochBatch {
	t.Helper()
	r, err := shards.NewReader(context.Background(), dir, shards.ReaderOptions{BatchSize: 4, Seed: 3, Epoch: epoch, Window: 2, KeepPartial: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []epochBatch
	for {
		b, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, epochBatch{keys: strings.Join(b.Keys, ","), labels: append([]int32{}, b.Labels...),
			passes: append([]int32{}, b.Passes...), view1: bytes.Clone(b.View1), view2: bytes.Clone(b.View2)})
	}
}

// TestModesThatDifferSaySo: at the default encoding above 96 px stored views are JPEG and
// views made on the fly raw, so the two modes train on other pixels; each dataset's summary
// line says so, and the trainer's record of the views (shards.Config.TrainerViews) tells
// them apart. With --encoding=raw the two agree (TestOnlineViewsAreTheStoredPasses) and
// nothing is said.
func TestModesThatDifferSaySo(t *testing.T) {
	var folder onlineSource
	for _, src := range onlineSources() {
		if src.name == "folder" {
			folder = src
		}
	}
	spec := folder.spec(t)
	for _, enc := range []shards.Encoding{"", shards.Raw} {
		o := PreprocessOptions{Spec: spec, Augment: preset(t, augment.SimCLRImageNet, 100), Seed: 5, Parts: 1, CodeVersion: "test", Encoding: enc}
		offline, online := o, o
		offline.Output, offline.Passes = filepath.Join(t.TempDir(), "offline"), 1
		online.Output, online.Passes, online.Online = filepath.Join(t.TempDir(), "online"), 1, true
		resOff, resOn := mustPreprocess(t, offline), mustPreprocess(t, online)
		same := readEpoch(t, offline.Output, 0)[0].equal(readEpoch(t, online.Output, 0)[0])
		noteOff := strings.Contains(resOff.Summary(offline.Output), "runs on the two differ")
		noteOn := strings.Contains(resOn.Summary(online.Output), "runs on the two differ")
		viewsDiffer := resOff.Manifest.Config.TrainerViews() != resOn.Manifest.Config.TrainerViews()
		if same == noteOff || same == noteOn || enc == "" && !viewsDiffer {
			t.Errorf("encoding %q: the modes' first batches equal %v; the summaries say they differ: stored %v, online %v; trainer's views %q and %q",
				enc, same, noteOff, noteOn, resOff.Manifest.Config.TrainerViews(), resOn.Manifest.Config.TrainerViews())
		}
	}
}

// TestBaseShardsKeepPublishedFiles: base shards hold a published image file that needs no
// shrinking as it is, at every view size: at 24 px (raw views) as at 100 px (JPEG views), no
// row holds decoded pixels, and the rows' bytes are the files'.
func TestBaseShardsKeepPublishedFiles(t *testing.T) {
	in := t.TempDir()
	pipelinetest.WriteFolder(t, in, []string{"cat", "dog"}, 3, 50, 38) // JPEG and PNG files
	var files int64
	err := filepath.WalkDir(in, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			st, _ := d.Info()
			files += st.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{24, 100} {
		o := PreprocessOptions{Spec: datasets.Spec{Dataset: datasets.Folder, Input: in, Split: "train"}, Augment: preset(t, augment.SimCLRCIFAR, size),
			Seed: 5, Parts: 1, CodeVersion: "test", Online: true, Passes: 1, Output: filepath.Join(t.TempDir(), "base")}
		m := mustPreprocess(t, o).Manifest
		var stored int64
		for _, sh := range m.Shards {
			for _, row := range readShardRows(t, filepath.Join(o.Output, sh.Path)) {
				if row.Encoding == string(shards.Raw) {
					t.Errorf("%d px: row %s holds decoded pixels (%d bytes)", size, row.Key, len(row.View1))
				}
				stored += int64(len(row.View1))
			}
		}
		if stored != files {
			t.Errorf("%d px: the rows hold %d bytes of images, the files are %d bytes", size, stored, files)
		}
	}
}
