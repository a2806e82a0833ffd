package pipelines

import (
	"context"
	"errors"
	"fmt"

	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// rowOverhead is what a row costs beyond its image bytes: key, indices, label, sizes.
const rowOverhead = 64

// storageSamples is how many records (the first of as many units) StorageEstimate reads to
// learn the size of base images.
const storageSamples = 8

// StorageEstimate is about how many bytes the job will write: the stored views of every
// pass (raw exactly; JPEG and PNG as DefaultParts estimates them), or for base shards
// (Online) the images as they will be stored, measured on the first record of up to
// storageSamples units: the published file's size where it is kept, else the raw or
// estimated encoded size of the (shrunk) pixels. It reads those few records and nothing
// else.
func (j *PreprocessJob) StorageEstimate(ctx context.Context) (int64, error) {
	cfg := &j.Config
	if !cfg.Online {
		view := float64(cfg.Height * cfg.Width * cfg.Channels)
		switch cfg.Encoding {
		case shards.JPEG:
			view /= 5
		case shards.PNG:
			view /= 2
		}
		return int64(float64(j.Plan.Records*int64(cfg.Passes)) * (view*float64(cfg.Views) + rowOverhead)), nil
	}
	var sum, n int64
	units := j.Plan.Units
	step := max(1, len(units)/storageSamples)
	for i := 0; i < len(units) && n < storageSamples; i += step {
		size, ok, err := firstBaseSize(ctx, cfg, units[i])
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
	return j.Plan.Records * (sum/n + rowOverhead), nil
}

var errEnough = errors.New("enough records")

// firstBaseSize is the stored size of the base image of a unit's first record.
func firstBaseSize(ctx context.Context, cfg *shards.Config, u datasets.Unit) (int64, bool, error) {
	var size int64
	found := false
	_, err := datasets.Read(ctx, u, func(r datasets.Record) error {
		h, w, c := r.Pixels.H, r.Pixels.W, cfg.Channels
		format := ""
		if r.Encoded != nil {
			h, w, format = r.Height, r.Width, r.Format
		}
		switch bh, bw := cfg.BaseSize(h, w); {
		case cfg.KeepsFile(format, h, w):
			size = int64(len(r.Encoded))
		case bh == h && bw == w:
			size = int64(h * w * c) // unshrunk pixels are stored raw
		default:
			size = int64(bh * bw * c)
			switch cfg.Encoding {
			case shards.JPEG:
				size /= 5
			case shards.PNG:
				size /= 2
			}
		}
		found = true
		return errEnough
	}, func(datasets.BadRecord) error { return nil })
	if err != nil && !errors.Is(err, errEnough) {
		return 0, false, fmt.Errorf("sampling %s for the storage estimate: %w", u, err)
	}
	return size, found, nil
}
