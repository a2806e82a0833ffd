package augment

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// Param is one overridable Config field as a command-line flag: its name (without any prefix),
// its usage text, and how to read and write it as text. Params lists them all, so a command
// line exposes every field without naming them one by one.
type Param struct {
	Name  string
	Usage string
	get   func(*Config) string
	set   func(*Config, string) error
}

// Get returns the field's value in the form Set accepts.
func (p Param) Get(c Config) string { return p.get(&c) }

// Set parses v into the field; it does not validate the whole Config.
func (p Param) Set(c *Config, v string) error {
	if err := p.set(c, strings.TrimSpace(v)); err != nil {
		return fmt.Errorf("--%s=%s: %w", p.Name, v, err)
	}
	return nil
}

// Params returns every overridable field, in a fixed order.
func Params() []Param {
	return []Param{
		intParam("view-size", "side of the square output view in pixels", func(c *Config) *int { return &c.Size }),
		intParam("eval-resize", "evaluation only: shorter side before the centre crop (0: 8/7 of view-size when ≥ 128, else view-size)", func(c *Config) *int { return &c.Resize }),
		pairParam("crop-scale", "RandomResizedCrop area fraction range MIN,MAX", func(c *Config) *[2]float64 { return &c.CropScale }),
		pairParam("crop-ratio", "RandomResizedCrop aspect-ratio (width/height) range MIN,MAX, sampled log-uniformly", func(c *Config) *[2]float64 { return &c.CropRatio }),
		floatParam("flip-p", "probability of a horizontal flip", func(c *Config) *float64 { return &c.FlipP }),
		floatParam("jitter-p", "probability of applying colour jitter", func(c *Config) *float64 { return &c.JitterP }),
		floatParam("brightness", "colour jitter brightness b: factor in [max(0,1-b), 1+b]; 0 off", func(c *Config) *float64 { return &c.Brightness }),
		floatParam("contrast", "colour jitter contrast c: factor in [max(0,1-c), 1+c]; 0 off", func(c *Config) *float64 { return &c.Contrast }),
		floatParam("saturation", "colour jitter saturation s: factor in [max(0,1-s), 1+s]; 0 off", func(c *Config) *float64 { return &c.Saturation }),
		floatParam("hue", "colour jitter hue h: shift in [-h, h] turns, h ≤ 0.5; 0 off", func(c *Config) *float64 { return &c.Hue }),
		floatParam("gray-p", "probability of converting to grayscale", func(c *Config) *float64 { return &c.GrayP }),
		perViewParam("blur-p", "probability of a Gaussian blur: P, or P0,P1 for view 0 and view 1", func(c *Config) *PerView { return &c.BlurP }),
		pairParam("blur-sigma", "Gaussian blur sigma range MIN,MAX", func(c *Config) *[2]float64 { return &c.BlurSigma }),
		intParam("blur-kernel", "Gaussian blur kernel side, odd (0: 10% of view-size, made odd)", func(c *Config) *int { return &c.BlurKernel }),
		perViewParam("solarize-p", "probability of solarizing: P, or P0,P1 for view 0 and view 1", func(c *Config) *PerView { return &c.SolarizeP }),
		intParam("solarize-threshold", "solarize inverts pixels at or above this value (0..256)", func(c *Config) *int { return &c.SolarizeThreshold }),
	}
}

// String lists every parameter as name=value in Params order: the exact command-line
// overrides that reproduce c from its preset.
func (c Config) String() string {
	var b strings.Builder
	b.WriteString("preset=" + c.Preset)
	for _, p := range Params() {
		b.WriteString(" " + p.Name + "=" + p.Get(c))
	}
	return b.String()
}

// Overrides collects the augmentation flags given on a command line, to be applied onto a
// preset once the preset and the view size are known (they usually come from other flags of
// the same command line).
type Overrides struct {
	given []override
}

type override struct {
	p Param
	v string
}

// RegisterFlags defines one flag per Param on fs, named prefix+Param.Name (e.g. prefix "" gives
// --crop-scale=0.08,1). A flag that is not given leaves the preset's value; values are checked
// for syntax when parsed and for range by Apply.
func RegisterFlags(fs *flag.FlagSet, prefix string) *Overrides {
	o := &Overrides{}
	for _, p := range Params() {
		fs.Var(&flagValue{o: o, p: p}, prefix+p.Name, p.Usage+" (default: the preset's)")
	}
	return o
}

// Given returns the flags that were set, as name=value, in command-line order.
func (o *Overrides) Given() []string {
	var out []string
	for _, g := range o.given {
		out = append(out, g.p.Name+"="+g.v)
	}
	return out
}

// Apply writes the given flags onto c, in command-line order, and validates the result.
func (o *Overrides) Apply(c *Config) error {
	var errs []error
	for _, g := range o.given {
		if err := g.p.Set(c, g.v); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.Validate()
}

type flagValue struct {
	o *Overrides
	p Param
	v string
}

func (f *flagValue) String() string { return f.v }

func (f *flagValue) Set(v string) error {
	var scratch Config
	if err := f.p.set(&scratch, strings.TrimSpace(v)); err != nil {
		return err
	}
	f.v = v
	f.o.given = append(f.o.given, override{p: f.p, v: v})
	return nil
}

func intParam(name, usage string, field func(*Config) *int) Param {
	return Param{Name: name, Usage: usage,
		get: func(c *Config) string { return strconv.Itoa(*field(c)) },
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("not an integer")
			}
			*field(c) = n
			return nil
		}}
}

func floatParam(name, usage string, field func(*Config) *float64) Param {
	return Param{Name: name, Usage: usage,
		get: func(c *Config) string { return formatFloat(*field(c)) },
		set: func(c *Config, v string) error {
			x, err := parseFloat(v)
			if err != nil {
				return err
			}
			*field(c) = x
			return nil
		}}
}

func pairParam(name, usage string, field func(*Config) *[2]float64) Param {
	return Param{Name: name, Usage: usage,
		get: func(c *Config) string { return pair(*field(c)) },
		set: func(c *Config, v string) error {
			xs, err := parseFloats(v, 2, 2)
			if err != nil {
				return err
			}
			*field(c) = [2]float64{xs[0], xs[1]}
			return nil
		}}
}

func perViewParam(name, usage string, field func(*Config) *PerView) Param {
	return Param{Name: name, Usage: usage,
		get: func(c *Config) string {
			p := *field(c)
			if p[0] == p[1] {
				return formatFloat(p[0])
			}
			return pair(p)
		},
		set: func(c *Config, v string) error {
			xs, err := parseFloats(v, 1, 2)
			if err != nil {
				return err
			}
			if len(xs) == 1 {
				xs = append(xs, xs[0])
			}
			*field(c) = PerView{xs[0], xs[1]}
			return nil
		}}
}

func parseFloat(v string) (float64, error) {
	x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	return x, nil
}

func parseFloats(v string, lo, hi int) ([]float64, error) {
	parts := strings.Split(v, ",")
	if len(parts) < lo || len(parts) > hi {
		if lo == hi {
			return nil, fmt.Errorf("want %d comma-separated numbers, got %d", lo, len(parts))
		}
		return nil, fmt.Errorf("want %d to %d comma-separated numbers, got %d", lo, hi, len(parts))
	}
	out := make([]float64, len(parts))
	for i, s := range parts {
		x, err := parseFloat(s)
		if err != nil {
			return nil, err
		}
		out[i] = x
	}
	return out, nil
}
