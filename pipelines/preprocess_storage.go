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

// storageSamples is how many records (the first of as many units) StorageEstimate reads to
// learn the size of a row.
const storageSamples = 8

// StorageEstimate is about how many bytes the job will write: the records times the passes
// (one for base shards) times the mean size of a row, measured on the first record of up to
// storageSamples units, spread over the plan, each made into its row by the code that
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
	units := j.Plan.Units
	step := max(1, len(units)/storageSamples)
	for i := 0; i < len(units) && n < storageSamples; i += step {
		pass := int(n) % cfg.Passes
		size, ok, err := sampleRowSize(ctx, cfg, m, units[i], pass)
		if err != nil {
			return 0, err
		}
		if ok {
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

var errEnough = errors.New("enough records")

// sampleRowSize is the image bytes of the row (of pass) that the first good record of a unit
// makes; a record whose image does not decode would be a dead letter, and the next is
// taken.
func sampleRowSize(ctx context.Context, cfg *shards.Config, m *rowMaker, u datasets.Unit, pass int) (int64, bool, error) {
	var size int64
	found := false
	_, err := datasets.Read(ctx, u, func(r datasets.Record) error {
		src := source{key: r.Key, index: r.Index, label: r.Label, img: r.Pixels, encoded: r.Encoded, limits: u.Limits}
		row, err := m.row(cfg, pass, src)
		var bad *badImage
		if errors.As(err, &bad) {
			return nil
		}
		if err != nil {
			return err
		}
		size, found = int64(len(row.View1)+len(row.View2)), true
		return errEnough
	}, func(datasets.BadRecord) error { return nil })
	if err != nil && !errors.Is(err, errEnough) {
		return 0, false, fmt.Errorf("sampling %s for the storage estimate: %w", u, err)
	}
	return size, found, nil
}
