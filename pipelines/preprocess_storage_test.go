package pipelines

import (
	"context"
	"fmt"
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

// TestStorageEstimateIsWhatIsWritten: dcl reproduce --plan's figure is within a few percent
// of the bytes the job then writes, for stored views (raw, PNG, and JPEG views of
// photograph-like ImageNet images, whose size no fixed share of the raw size gives) and for
// base shards (the published files kept, or decoded pixels).
func TestStorageEstimateIsWhatIsWritten(t *testing.T) {
	photos := t.TempDir() // ILSVRC-sized JPEGs in class folders
	for c := range 4 {
		for i := range 3 {
			testfiles.WriteFile(t, filepath.Join(photos, fmt.Sprintf("class%d", c), fmt.Sprintf("%d.JPEG", i)), testfiles.PhotoJPEG(t, 500, 375, c*10+i))
		}
	}
	stl := t.TempDir()
	pipelinetest.WriteSTL10(t, stl, 12, 1, 0)
	cifar := t.TempDir()
	pipelinetest.WriteCIFAR10(t, cifar, 4)

	tests := []struct {
		name    string
		spec    datasets.Spec
		preset  string
		size    int
		enc     shards.Encoding
		passes  int
		online  bool
		maxSide int
	}{
		{"photos jpeg views", datasets.Spec{Dataset: datasets.Folder, Input: photos}, augment.DCLPaper, 224, shards.JPEG, 2, false, 0},
		{"photos evaluation views", datasets.Spec{Dataset: datasets.Folder, Input: photos}, augment.None, 224, shards.JPEG, 1, false, 0},
		{"photos base shards (the published files)", datasets.Spec{Dataset: datasets.Folder, Input: photos}, augment.DCLPaper, 224, shards.JPEG, 1, true, 0},
		{"photos base shards (shrunk, JPEG)", datasets.Spec{Dataset: datasets.Folder, Input: photos}, augment.DCLPaper, 224, shards.JPEG, 1, true, 256},
		{"stl10 png views", datasets.Spec{Dataset: datasets.STL10, Input: stl}, augment.DCLPaper, 96, shards.PNG, 2, false, 0},
		{"stl10 base shards (raw pixels)", datasets.Spec{Dataset: datasets.STL10, Input: stl}, augment.DCLPaper, 96, shards.PNG, 1, true, 0},
		{"cifar10 raw views", datasets.Spec{Dataset: datasets.CIFAR10, Input: cifar}, augment.DCLPaper, 32, shards.Raw, 3, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			tt.spec.UnitRecords = 2 // more units than samples: the estimate samples some records only
			o := PreprocessOptions{Spec: tt.spec, Output: filepath.Join(t.TempDir(), "out"), Augment: preset(t, tt.preset, tt.size),
				Passes: tt.passes, Online: tt.online, MaxSide: tt.maxSide, Encoding: tt.enc, Seed: 3, Parts: 1, CodeVersion: "test"}
			job, err := PlanPreprocess(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			estimate, err := job.StorageEstimate(ctx)
			if err != nil {
				t.Fatal(err)
			}
			mustPreprocess(t, o)
			var written, views int64
			for _, row := range readAllRows(t, o.Output) {
				views += int64(len(row.View1) + len(row.View2))
			}
			err = filepath.WalkDir(o.Output, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(p, ".parquet") {
					return err
				}
				info, err := d.Info()
				written += info.Size()
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			// The images' bytes are what the estimate measures; the shards' files add the
			// other columns and Parquet's own footers, which rowOverhead stands for.
			r := float64(estimate) / float64(written)
			t.Logf("estimate %d bytes, written %d: %.3f×", estimate, written, r)
			if r < 0.9 || r > 1.1 {
				t.Errorf("estimate %d bytes, written %d (of which images %d): %.2f× what was written", estimate, written, views, r)
			}
		})
	}
}
