package pipelines

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/pipelinetest"
	"github.com/dcl-beam/dcl-beam/internal/testfiles"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// onlineSource is a small input of one dataset reader.
type onlineSource struct {
	name    string
	spec    func(t *testing.T) datasets.Spec
	maxSide int
}

func onlineSources() []onlineSource {
	return []onlineSource{
		{name: "cifar10", spec: func(t *testing.T) datasets.Spec {
			in := t.TempDir()
			pipelinetest.WriteCIFAR10(t, in, 7)
			return datasets.Spec{Dataset: datasets.CIFAR10, Input: in, Split: "train", UnitRecords: 8}
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
				mOff := mustPreprocess(t, offline).Manifest
				mOn := mustPreprocess(t, online).Manifest
				if !mOn.Config.Online || mOn.Config.Passes != 1 || mOn.Rows != mOff.Rows/passes || mOn.Records != mOff.Records {
					t.Fatalf("base shards: online %v, %d passes, %d rows of %d records; stored views: %d rows of %d records",
						mOn.Config.Online, mOn.Config.Passes, mOn.Rows, mOn.Records, mOff.Rows, mOff.Records)
				}
				mustVerify(t, online.Output)
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
