package augment

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// Param is one overridable Config field: its declaration (registry.Param: the name, which is
// both the flag, without any prefix, and the key of a reproduce config's
// preprocess.augment_overrides; the doc; the type of its values; and its check, which
// Validate runs) and the field it sets. Params lists them all, so a command line and a
// config expose every field without naming them one by one.
type Param struct {
	registry.Param
	field func(*Config) any // a pointer to the field: *int, *float64, *[2]float64 or *PerView
}

// Get returns the field's value in the form Set accepts.
func (p Param) Get(c Config) string { return p.FormatValue(p.value(&c)) }

// value is the field's value as the declaration holds it (numbers as float64).
func (p Param) value(c *Config) any {
	switch f := p.field(c).(type) {
	case *int:
		return float64(*f)
	case *float64:
		return *f
	case *[2]float64:
		return *f
	case *PerView:
		return *f
	}
	panic("augment: a field of an unknown type")
}

// Set parses v into the field; it does not validate the whole Config.
func (p Param) Set(c *Config, v string) error {
	x, err := p.ParseText(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("--%s=%s: %w", p.Name, v, err)
	}
	switch f := p.field(c).(type) {
	case *int:
		*f = int(x.(float64))
	case *float64:
		*f = x.(float64)
	case *[2]float64:
		*f = x.([2]float64)
	case *PerView:
		*f = x.(PerView)
	}
	return nil
}

// Params returns every overridable field, in a fixed order.
func Params() []Param {
	return []Param{
		intParam("view-size", "side of the square output view in pixels", inRange(1, MaxSize), func(c *Config) *int { return &c.Size }),
		intParam("eval-resize", "evaluation only: shorter side before the centre crop (0: 8/7 of view-size when ≥ 128, else view-size)",
			func(v float64) string {
				if v < 0 || v > MaxSize {
					return fmt.Sprintf("must be 0 (automatic) or in 1..%d", MaxSize)
				}
				return ""
			}, func(c *Config) *int { return &c.Resize }),
		pairParam("crop-scale", "RandomResizedCrop area fraction range MIN,MAX", 1, func(c *Config) *[2]float64 { return &c.CropScale }),
		pairParam("crop-ratio", "RandomResizedCrop aspect-ratio (width/height) range MIN,MAX, sampled log-uniformly", math.MaxFloat64, func(c *Config) *[2]float64 { return &c.CropRatio }),
		floatParam("flip-p", "probability of a horizontal flip", probability, func(c *Config) *float64 { return &c.FlipP }),
		floatParam("jitter-p", "probability of applying colour jitter", probability, func(c *Config) *float64 { return &c.JitterP }),
		floatParam("brightness", "colour jitter brightness b: factor in [max(0,1-b), 1+b]; 0 off", jitterStrength, func(c *Config) *float64 { return &c.Brightness }),
		floatParam("contrast", "colour jitter contrast c: factor in [max(0,1-c), 1+c]; 0 off", jitterStrength, func(c *Config) *float64 { return &c.Contrast }),
		floatParam("saturation", "colour jitter saturation s: factor in [max(0,1-s), 1+s]; 0 off", jitterStrength, func(c *Config) *float64 { return &c.Saturation }),
		floatParam("hue", "colour jitter hue h: shift in [-h, h] turns, h ≤ 0.5; 0 off", func(v float64) string {
			if v >= 0 && v <= 0.5 {
				return ""
			}
			return "must be in [0, 0.5]"
		}, func(c *Config) *float64 { return &c.Hue }),
		floatParam("gray-p", "probability of converting to grayscale", probability, func(c *Config) *float64 { return &c.GrayP }),
		perViewParam("blur-p", "probability of a Gaussian blur: P, or P0,P1 for view 0 and view 1", func(c *Config) *PerView { return &c.BlurP }),
		pairParam("blur-sigma", "Gaussian blur sigma range MIN,MAX", math.MaxFloat64, func(c *Config) *[2]float64 { return &c.BlurSigma }),
		intParam("blur-kernel", "Gaussian blur kernel side, odd (0: 10% of view-size, made odd)", func(v float64) string {
			if v < 0 || (v > 0 && math.Mod(v, 2) == 0) || v > 1023 {
				return "must be 0 (10% of view-size, odd) or an odd number in 1..1023"
			}
			return ""
		}, func(c *Config) *int { return &c.BlurKernel }),
		perViewParam("solarize-p", "probability of solarizing: P, or P0,P1 for view 0 and view 1", func(c *Config) *PerView { return &c.SolarizeP }),
		intParam("solarize-threshold", "solarize inverts pixels at or above this value (0..256)", inRange(0, 256), func(c *Config) *int { return &c.SolarizeThreshold }),
	}
}

// The checks the declarations share.
func probability(p float64) string {
	if p >= 0 && p <= 1 {
		return ""
	}
	return "a probability must be in [0, 1]"
}

func jitterStrength(v float64) string {
	if v >= 0 && v <= 100 {
		return ""
	}
	return "must be in [0, 100] (factors are drawn from [max(0, 1-b), 1+b])"
}

func inRange(lo, hi int) func(float64) string {
	return func(v float64) string {
		if v >= float64(lo) && v <= float64(hi) {
			return ""
		}
		return fmt.Sprintf("must be in %d..%d", lo, hi)
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
		fs.Var(&flagValue{o: o, p: p}, prefix+p.Name, p.Doc+" (default: the preset's)")
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

// List is the given flags as overrides, in command-line order.
func (o *Overrides) List() []Override {
	out := make([]Override, len(o.given))
	for i, g := range o.given {
		out[i] = Override{Name: g.p.Name, Value: g.v}
	}
	return out
}

// Apply writes the given flags onto c, in command-line order, and validates the result.
func (o *Overrides) Apply(c *Config) error { return ApplyOverrides(c, o.List()) }

// Override is one parameter's value, as text, set over a preset: a flag of a command line,
// or an entry of a config's preprocess.augment_overrides.
type Override struct {
	Name, Value string
}

// ApplyOverrides sets each override's parameter on c, in order, and validates the result;
// an unknown name is an error listing the parameters.
func ApplyOverrides(c *Config, overrides []Override) error {
	params := Params()
	var errs []error
	for _, o := range overrides {
		i := slices.IndexFunc(params, func(p Param) bool { return p.Name == o.Name })
		if i < 0 {
			names := make([]string, len(params))
			for j, p := range params {
				names[j] = p.Name
			}
			errs = append(errs, fmt.Errorf("unknown parameter %q (want one of %s)", o.Name, strings.Join(names, ", ")))
			continue
		}
		if err := params[i].Set(c, o.Value); err != nil {
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
	if _, err := f.p.ParseText(strings.TrimSpace(v)); err != nil {
		return err
	}
	f.v = v
	f.o.given = append(f.o.given, override{p: f.p, v: v})
	return nil
}

func intParam(name, doc string, check func(float64) string, field func(*Config) *int) Param {
	return Param{registry.Param{Name: name, Type: registry.Int, Doc: doc, Check: check}, func(c *Config) any { return field(c) }}
}

func floatParam(name, doc string, check func(float64) string, field func(*Config) *float64) Param {
	return Param{registry.Param{Name: name, Doc: doc, Check: check}, func(c *Config) any { return field(c) }}
}

// pairParam is a range MIN,MAX: 0 < min ≤ max ≤ hi.
func pairParam(name, doc string, hi float64, field func(*Config) *[2]float64) Param {
	check := func(v any) string {
		r := v.([2]float64)
		for _, x := range r {
			if math.IsNaN(x) || x > hi || x <= 0 {
				return fmt.Sprintf("values must be in (0, %g]", hi)
			}
		}
		if r[0] > r[1] {
			return "min is greater than max"
		}
		return ""
	}
	return Param{registry.Param{Name: name, Value: registry.Floats([2]float64{}, 2, nil), Doc: doc, CheckValue: check},
		func(c *Config) any { return field(c) }}
}

// perViewParam is a probability per view: P, or P0,P1.
func perViewParam(name, doc string, field func(*Config) *PerView) Param {
	check := func(v any) string {
		for i, p := range v.(PerView) {
			if reason := probability(p); reason != "" {
				return fmt.Sprintf("%s (view %d)", reason, i)
			}
		}
		return ""
	}
	return Param{registry.Param{Name: name, Value: registry.Floats(PerView{}, 1, nil), Doc: doc, CheckValue: check},
		func(c *Config) any { return field(c) }}
}
