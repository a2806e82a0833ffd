package pipelines

import (
	"context"
	"errors"
	"fmt"

	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// rowOverhead is what a row costs beyond its image bytes: key, indices, label, sizes.
const rowOverhead = 64

// storageSamples is how many records StorageEstimate reads to learn the size of a row, and
// storagePasses in how many passes each makes its views: a view's size varies with its crop
// far more than an image's with the image.
const (
	storageSamples = 8
	storagePasses  = 4
)

// StorageEstimate is about how many bytes the job will write: the records times the passes
// (one for base shards) times the mean size of a row, measured on storageSamples records
// from units spread over the plan (sampleUnits), each made into its row by the code that
// writes it: the stored views of a pass (the sample's pass cycling through the passes), or
// the base image (the published file where it is kept, else the raw or encoded, perhaps
// shrunk, pixels). Measured rather than assumed because the size of a JPEG or PNG view
// depends on the augmentation as much as on the pixels: blurred, cropped and upscaled views
// of photographs take about half of what a fixed share of their raw size says. It reads
// those few records and nothing else, and the estimate is linear in the plan's record
// count.
func (j *PreprocessJob) StorageEstimate(ctx context.Context) (int64, error) {
	cfg := &j.Config
	aug, err := cfg.AugmentConfig()
	if err != nil {
		return 0, err
	}
	a, err := augment.New(aug)
	if err != nil {
		return 0, err
	}
	base, err := shards.NewBaseMaker(cfg)
	if err != nil {
		return 0, err
	}
	m := &rowMaker{aug: a, base: base}
	var sum, n int64
	units := sampleUnits(j.Plan.Units)
	if len(units) == 0 {
		return 0, nil
	}
	per := (storageSamples + len(units) - 1) / len(units)
	for _, u := range units {
		if n == storageSamples {
			break
		}
		sizes, err := sampleRowSizes(ctx, cfg, m, u, int(n), int(min(int64(per), storageSamples-n)))
		if err != nil {
			return 0, err
		}
		for _, size := range sizes {
			sum += size
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	passes := int64(cfg.Passes)
	if cfg.Online {
		passes = 1
	}
	return int64(float64(j.Plan.Records*passes) * (float64(sum)/float64(n) + rowOverhead)), nil
}

// sampleUnits picks up to storageSamples units to sample, spread over the plan, among those
// that begin their file (First 0) where any does: reading a record in the middle of a
// gzipped file (IDX) decompresses all that comes before it.
func sampleUnits(all []datasets.Unit) []datasets.Unit {
	var starts []datasets.Unit
	for _, u := range all {
		if u.First == 0 {
			starts = append(starts, u)
		}
	}
	if len(starts) == 0 {
		starts = all
	}
	step := max(1, len(starts)/storageSamples)
	var units []datasets.Unit
	for i := 0; i < len(starts) && len(units) < storageSamples; i += step {
		units = append(units, starts[i])
	}
	return units
}

var errEnough = errors.New("enough records")

// sampleRowSizes is the mean image bytes of the rows that each of the first want good
// records of a unit makes in up to storagePasses of the passes (the k-th sample's from pass
// k·storagePasses on); a record whose image does not decode would be a dead letter, and the
// next is taken.
func sampleRowSizes(ctx context.Context, cfg *shards.Config, m *rowMaker, u datasets.Unit, first, want int) ([]int64, error) {
	var sizes []int64
	_, err := datasets.Read(ctx, u, func(r datasets.Record) error {
		src := source{key: r.Key, index: r.Index, label: r.Label, img: r.Pixels, encoded: r.Encoded, limits: u.Limits}
		var size int64
		k := first + len(sizes)
		passes := min(storagePasses, cfg.Passes)
		if cfg.Online {
			passes = 1
		}
		for p := range passes {
			row, err := m.row(cfg, (k*storagePasses+p)%cfg.Passes, src)
			var bad *badImage
			if errors.As(err, &bad) {
				return nil
			}
			if err != nil {
				return err
			}
			size += int64(len(row.View1) + len(row.View2))
		}
		if sizes = append(sizes, size/int64(passes)); len(sizes) == want {
			return errEnough
		}
		return nil
	}, func(datasets.BadRecord) error { return nil })
	if err != nil && !errors.Is(err, errEnough) {
		return nil, fmt.Errorf("sampling %s for the storage estimate: %w", u, err)
	}
	return sizes, nil
}
