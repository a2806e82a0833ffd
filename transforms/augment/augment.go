package augment

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/dcl-beam/dcl-beam/transforms"
)

// Augmenter applies one Config, reusing its scratch buffers from view to view, so steady-state
// views allocate nothing but (with View) their output. It is NOT safe for concurrent use: give
// each goroutine (each DoFn instance) its own; they are cheap to create.
type Augmenter struct {
	cfg Config
	rng Rand
	hc  coeffs
	vc  coeffs
	tmp []uint8
	acc []int32
	lut [256]uint8

	blurW      []float64
	blurQ      []int32
	blurPad    []uint8
	blurPacked []uint64
	blurMid    []uint64
	blurAcc    []uint64
	blurQ64    []uint64
	blurPtrs   []unsafe.Pointer // the rows sumTapsAVX2 reads
}

// New returns an Augmenter for cfg, or cfg's validation error.
func New(cfg Config) (*Augmenter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("augmentation config: %w", err)
	}
	return &Augmenter{cfg: cfg}, nil
}

// View is a one-off New(cfg).View(...): simple, but it allocates the scratch buffers every
// call; use an Augmenter for more than a few views.
func View(cfg Config, src transforms.Image, seed uint64, key string, epoch, view int) (transforms.Image, error) {
	a, err := New(cfg)
	if err != nil {
		return transforms.Image{}, err
	}
	return a.View(src, seed, key, epoch, view)
}

// Config returns the configuration the Augmenter applies.
func (a *Augmenter) Config() Config { return a.cfg }

// Plan returns what the randomness decides for one view of an h×w image: a pure function of
// (Config, h, w, seed, key, epoch, view); see Config.Sample and ViewSeed.
func (a *Augmenter) Plan(h, w int, seed uint64, key string, epoch, view int) Plan {
	a.rng.reset(seed, key, epoch, view)
	return a.cfg.Sample(h, w, view, &a.rng)
}

// View returns view number view (0 or 1 for a pair; views ≥ 1 share view 1's per-view
// probabilities) of src for the given epoch: Size×Size with src's channel count, in a newly
// allocated image. The result is a pure function of (Config, src, seed, key, epoch, view),
// identical on every machine.
func (a *Augmenter) View(src transforms.Image, seed uint64, key string, epoch, view int) (transforms.Image, error) {
	var dst transforms.Image
	err := a.ViewInto(&dst, src, seed, key, epoch, view)
	return dst, err
}

// ViewInto is View writing into dst, whose Pix is reused when its capacity allows; it must
// not share memory with src.Pix.
func (a *Augmenter) ViewInto(dst *transforms.Image, src transforms.Image, seed uint64, key string, epoch, view int) error {
	if epoch < 0 || view < 0 {
		return fmt.Errorf("augmenting %q: epoch %d and view %d must be non-negative", key, epoch, view)
	}
	if err := src.Validate(); err != nil {
		return fmt.Errorf("augmenting %q: %w", key, err)
	}
	p := a.Plan(src.H, src.W, seed, key, epoch, view)
	if err := a.Apply(dst, src, p); err != nil {
		return fmt.Errorf("augmenting %q: %w", key, err)
	}
	return nil
}

// Apply applies a Plan (usually from Plan) to src, writing dst (whose Pix must not share
// memory with src.Pix). The steps run in torchvision's order: crop and resize (with the flip
// folded into the resize), colour jitter (its adjustments in p.Order), grayscale, blur,
// solarize.
func (a *Augmenter) Apply(dst *transforms.Image, src transforms.Image, p Plan) error {
	if err := src.Validate(); err != nil {
		return err
	}
	size, ch := a.cfg.Size, src.C
	dst.H, dst.W, dst.C = size, size, ch
	dst.Pix = grow(dst.Pix, size*size*ch)
	if a.cfg.Eval {
		a.resample(dst.Pix, src.Pix, src.W, ch, a.evalJob(src.H, src.W))
		return nil
	}
	if p.CropH <= 0 || p.CropW <= 0 || p.CropTop < 0 || p.CropLeft < 0 ||
		p.CropTop+p.CropH > src.H || p.CropLeft+p.CropW > src.W {
		return fmt.Errorf("crop %dx%d at (%d,%d) does not fit the %dx%d image",
			p.CropH, p.CropW, p.CropTop, p.CropLeft, src.H, src.W)
	}
	a.resample(dst.Pix, src.Pix, src.W, ch, resizeJob{
		top: p.CropTop, left: p.CropLeft, bh: p.CropH, bw: p.CropW,
		fullH: size, fullW: size, outH: size, outW: size, flip: p.Flip,
	})
	pix := dst.Pix
	if p.Jitter {
		for _, op := range p.Order {
			switch op {
			case OpBrightness:
				if p.Brightness != 1 {
					brightness(pix, p.Brightness, &a.lut)
				}
			case OpContrast:
				if p.Contrast != 1 {
					contrast(pix, ch, p.Contrast, &a.lut)
				}
			case OpSaturation:
				if p.Saturation != 1 {
					saturation(pix, ch, p.Saturation)
				}
			case OpHue:
				hue(pix, ch, p.Hue)
			}
		}
	}
	if p.Gray {
		grayscale(pix, ch)
	}
	if p.Blur {
		if !(p.Sigma > 0) {
			return fmt.Errorf("blur sigma %g: must be positive", p.Sigma)
		}
		a.blur(pix, size, size, ch, a.blurKernel(a.cfg.BlurKernelSize(), p.Sigma))
	}
	if p.Solarize {
		solarize(pix, a.cfg.SolarizeThreshold, &a.lut)
	}
	return nil
}

// evalJob is torchvision's Resize(EvalResize()) then CenterCrop(Size): the shorter side
// becomes R and the longer ⌊R·long/short⌋; the crop starts at roundEven((side − Size)/2).
// Only the kept window is computed.
func (a *Augmenter) evalJob(h, w int) resizeJob {
	r, size := a.cfg.EvalResize(), a.cfg.Size
	rh, rw := r, r
	if w <= h {
		rh = int(float64(r*h) / float64(w))
	} else {
		rw = int(float64(r*w) / float64(h))
	}
	return resizeJob{
		bh: h, bw: w, fullH: rh, fullW: rw,
		oy:   int(math.RoundToEven(float64(rh-size) / 2)),
		ox:   int(math.RoundToEven(float64(rw-size) / 2)),
		outH: size, outW: size,
	}
}

// Resize resamples the whole of src to h×w into dst with the views' antialiased bilinear
// filter (Pillow's, in integers): the bound on an image's longer side (shards.Config's
// MaxSide) uses it, so preprocessing and the shard reader shrink an image identically.
func (a *Augmenter) Resize(dst *transforms.Image, src transforms.Image, h, w int) error {
	if err := src.Validate(); err != nil {
		return err
	}
	if h <= 0 || w <= 0 {
		return fmt.Errorf("resize to %dx%d: both sides must be positive", h, w)
	}
	dst.H, dst.W, dst.C = h, w, src.C
	dst.Pix = grow(dst.Pix, h*w*src.C)
	a.resample(dst.Pix, src.Pix, src.W, src.C, resizeJob{bh: src.H, bw: src.W, fullH: h, fullW: w, outH: h, outW: w})
	return nil
}
