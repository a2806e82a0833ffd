package pipelines

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/fashionmnist"
	"github.com/dcl-beam/dcl-beam/internal/testing/gcstest"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// TestPreprocessFashionMNIST runs on real data: the first 3,000 Fashion-MNIST training
// images as simclr-cifar pairs at 28 px, and the whole test split as evaluation shards.
// Verify accepts both and their labels are the dataset's own.
func TestPreprocessFashionMNIST(t *testing.T) {
	dir := fashionmnist.Dir(t)
	trainLabels := fashionmnist.Load(t, "train", 3000).Labels
	o := PreprocessOptions{
		Spec:   datasets.Spec{Dataset: datasets.FashionMNIST, Input: dir, Split: "train", UnitRecords: 1000},
		Output: filepath.Join(t.TempDir(), "train"), Augment: preset(t, augment.SimCLRCIFAR, 28),
		Passes: 1, Seed: 1, Limit: 3000, CodeVersion: "test",
	}
	res := mustPreprocess(t, o)
	sum := mustVerify(t, o.Output)
	want := map[int32]int64{}
	for _, l := range trainLabels[:3000] {
		want[int32(l)]++
	}
	if sum.Rows != 3000 || sum.Views != 6000 || !maps.Equal(sum.Labels, want) {
		t.Errorf("train: %d rows, %d views, labels %v; want 3000, 6000, %v", sum.Rows, sum.Views, sum.Labels, want)
	}
	if c := res.Manifest.Config; c.Channels != 1 || c.Height != 28 || c.Encoding != shards.Raw || c.Parts != 1 {
		t.Errorf("config %+v: want 1 channel, 28 px, raw, 1 shard", c)
	}

	test := PreprocessOptions{
		Spec:   datasets.Spec{Dataset: datasets.FashionMNIST, Input: dir, Split: "test"},
		Output: filepath.Join(t.TempDir(), "test"), Augment: preset(t, augment.None, 28),
		Passes: 1, Seed: 1, CodeVersion: "test",
	}
	mustPreprocess(t, test)
	sum = mustVerify(t, test.Output)
	if sum.Rows != 10000 || len(sum.Labels) != 10 {
		t.Fatalf("test: %d rows, labels %v", sum.Rows, sum.Labels)
	}
	for l, n := range sum.Labels {
		if n != 1000 {
			t.Errorf("test: label %d has %d images, want 1000", l, n)
		}
	}
}

// TestPreprocessGCS reads a dataset from gs:// and writes one there, against a GCS
// emulator: Verify accepts it, and its shards are the bytes a local run writes.
func TestPreprocessGCS(t *testing.T) {
	ctx := context.Background()
	local := cifarOptions(t, 4)
	mustPreprocess(t, local)

	bucket := gcstest.Start(t, "dcl-preprocess")
	in := bucket + "/cifar-10-batches-bin"
	entries, err := os.ReadDir(local.Spec.Input)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(local.Spec.Input, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := storage.WriteFile(ctx, in+"/"+e.Name(), data); err != nil {
			t.Fatal(err)
		}
	}
	remote := local
	remote.Spec.Input, remote.Output = bucket, bucket+"/out" // the parent of the folder, as for a download
	res := mustPreprocess(t, remote)
	mustVerify(t, remote.Output)
	for _, s := range res.Manifest.Shards {
		got, err := storage.ReadFile(ctx, remote.Output+"/"+s.Path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(local.Output, s.Path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s on gs:// differs from the local run's", s.Path)
		}
	}
	// And the refusal of another dataset works there too.
	remote.Seed++
	_, err = runPreprocess(t, remote)
	var diff *shards.DifferentDatasetError
	if !errors.As(err, &diff) {
		t.Errorf("another seed into the same gs:// directory: %v, want a DifferentDatasetError", err)
	}
}
