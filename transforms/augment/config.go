package augment

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// Preset names.
const (
	SimCLRCIFAR    = "simclr-cifar"
	SimCLRImageNet = "simclr-imagenet"
	BYOL           = "byol"
	None           = "none"
	// CropFlip is RandomResizedCrop and a horizontal flip, nothing else: the transform the
	// linear probe's training images take in OpenSelfSup's and MoCo's linear evaluation.
	CropFlip = "crop-flip"
	// DCLPaper is the paper's own statement of its augmentation (appendix, "Default DCL
	// augmentations"), for every dataset: simclr-imagenet's parameters at any view size.
	DCLPaper = "dcl-paper"
)

// MaxSize bounds Config.Size and the evaluation resize, so that a typo on the command line
// cannot ask for gigabytes per view.
const MaxSize = 8192

// PerView is a probability that may differ between the two views of a pair, as BYOL's does:
// element 0 applies to view 0, element 1 to view 1 and to any later view. On the command line
// it is written "P" (both views) or "P0,P1".
type PerView [2]float64

// At returns the value for a view index.
func (p PerView) At(view int) float64 {
	if view <= 0 {
		return p[0]
	}
	return p[1]
}

// Config is every parameter of the augmentations. Start from Preset, change fields (or apply
// command-line flags, see RegisterFlags), and call Validate. The json names are the ones a
// manifest records; the flag names (Params) are given with each field.
type Config struct {
	// Preset is the preset this configuration started from (informational).
	Preset string `json:"preset"`
	// Eval selects the evaluation transform: resize the shorter side to EvalResize() and crop
	// the Size×Size centre. No randomness; every field below Size except Resize is ignored.
	Eval bool `json:"eval"`
	// Size is the side of the square output view (32 CIFAR, 96 STL-10, 224 ImageNet, 28
	// Fashion-MNIST). Flag view-size.
	Size int `json:"size"`
	// Resize is the evaluation transform's shorter side before the centre crop; 0 means
	// round(Size·8/7) when Size ≥ 128 (224 → 256, ImageNet's protocol) and Size otherwise
	// (small datasets are evaluated as they are). Flag eval-resize.
	Resize int `json:"resize"`

	// CropScale is RandomResizedCrop's range of the crop's area as a fraction of the image's,
	// 0 < min ≤ max ≤ 1. Flag crop-scale.
	CropScale [2]float64 `json:"crop_scale"`
	// CropRatio is RandomResizedCrop's range of the crop's aspect ratio width/height, sampled
	// log-uniformly, 0 < min ≤ max. Flag crop-ratio.
	CropRatio [2]float64 `json:"crop_ratio"`
	// FlipP is the probability of a horizontal flip. Flag flip-p.
	FlipP float64 `json:"flip_p"`

	// JitterP is the probability that ColorJitter runs at all. Flag jitter-p.
	JitterP float64 `json:"jitter_p"`
	// Brightness, Contrast and Saturation b give factors drawn from [max(0, 1−b), 1+b]; 0
	// disables the adjustment. Flags brightness, contrast, saturation.
	Brightness float64 `json:"brightness"`
	Contrast   float64 `json:"contrast"`
	Saturation float64 `json:"saturation"`
	// Hue h gives a hue shift drawn from [−h, h] (in turns, h ≤ 0.5); 0 disables it. Flag hue.
	Hue float64 `json:"hue"`
	// GrayP is the probability of converting to grayscale (kept as 3 channels). Flag gray-p.
	GrayP float64 `json:"gray_p"`

	// BlurP is the probability of a Gaussian blur, per view. Flag blur-p.
	BlurP PerView `json:"blur_p"`
	// BlurSigma is the range σ is drawn from, 0 < min ≤ max. Flag blur-sigma.
	BlurSigma [2]float64 `json:"blur_sigma"`
	// BlurKernel is the odd kernel side; 0 means 10% of Size rounded down, plus one if even
	// (224 → 23, 96 → 9, 32 → 3, 28 → 3). Flag blur-kernel.
	BlurKernel int `json:"blur_kernel"`

	// SolarizeP is the probability of solarizing, per view. Flag solarize-p.
	SolarizeP PerView `json:"solarize_p"`
	// SolarizeThreshold: pixels ≥ it are inverted (255 − v), 0…256. Flag solarize-threshold.
	SolarizeThreshold int `json:"solarize_threshold"`
}

// presets is the preset registry: what each preset sets on top of the settings every preset
// starts from (Preset).
var presets = registry.New[func(*Config)]("augmentation preset")

// registerPreset adds a preset: set fills in what it changes from the common start (crop
// scale 0.08–1, ratio 3/4–4/3, blur σ 0.1–2, solarize threshold 128, everything else off).
// It panics on a name already taken.
func registerPreset(name string, set func(*Config)) { presets.Register(name, set) }

func init() {
	simclr := func(strength, saturation, hue float64) func(*Config) {
		return func(c *Config) {
			c.FlipP, c.JitterP, c.GrayP = 0.5, 0.8, 0.2
			c.Brightness, c.Contrast, c.Saturation, c.Hue = strength, strength, saturation, hue
		}
	}
	registerPreset(SimCLRCIFAR, simclr(0.4, 0.4, 0.1))
	imagenet := func(c *Config) {
		// The appendix leaves the blur's probability and kernel unstated: SimCLR's.
		simclr(0.8, 0.8, 0.2)(c)
		c.BlurP = PerView{0.5, 0.5}
	}
	registerPreset(SimCLRImageNet, imagenet)
	registerPreset(DCLPaper, imagenet)
	registerPreset(BYOL, func(c *Config) {
		simclr(0.4, 0.2, 0.1)(c)
		c.BlurP = PerView{1.0, 0.1}
		c.SolarizeP = PerView{0, 0.2}
	})
	registerPreset(CropFlip, func(c *Config) { c.FlipP = 0.5 })
	registerPreset(None, func(c *Config) { c.Eval = true })
}

// Presets lists the preset names Preset accepts, in registration order.
func Presets() []string { return presets.Names() }

// Preset returns a named preset (registered in init above) producing size×size views.
func Preset(name string, size int) (Config, error) {
	set, ok := presets.Lookup(name)
	if !ok {
		return Config{}, fmt.Errorf("unknown augmentation preset %q (want one of %s)", name, strings.Join(Presets(), ", "))
	}
	c := Config{
		Preset:            name,
		Size:              size,
		CropScale:         [2]float64{0.08, 1},
		CropRatio:         [2]float64{3.0 / 4.0, 4.0 / 3.0},
		BlurSigma:         [2]float64{0.1, 2.0},
		SolarizeThreshold: 128,
	}
	set(&c)
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("preset %s: %w", name, err)
	}
	return c, nil
}

// EvalResize is the shorter side the evaluation transform resizes to (see Resize).
func (c Config) EvalResize() int {
	switch {
	case c.Resize > 0:
		return c.Resize
	case c.Size >= 128:
		return int(math.Round(float64(c.Size) * 8 / 7))
	}
	return c.Size
}

// BlurKernelSize is the Gaussian kernel side in use (see BlurKernel).
func (c Config) BlurKernelSize() int {
	if c.BlurKernel > 0 {
		return c.BlurKernel
	}
	return c.Size/10 | 1
}

// Validate reports every inconsistent or out-of-range field, joined into one error: each
// field's declared check (Params), then what fields must satisfy together.
func (c Config) Validate() error {
	var errs []error
	for _, p := range Params() {
		if reason := p.Reason(p.value(&c)); reason != "" {
			// Named as its flag is (flags.go), so a command line reports the flag.
			errs = append(errs, usage.Value(p.Name, p.Get(c), "%s", reason))
		}
	}
	if c.Resize > 0 && c.Resize <= MaxSize && c.Resize < c.Size {
		errs = append(errs, usage.Value("eval-resize", c.Resize, "must be at least view-size %d (the centre crop must fit)", c.Size))
	}
	if c.Preset != "" && !slices.Contains(Presets(), c.Preset) {
		errs = append(errs, fmt.Errorf("preset %q: unknown (want one of %s)", c.Preset, strings.Join(Presets(), ", ")))
	}
	return errors.Join(errs...)
}
