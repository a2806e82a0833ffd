package augment

import (
	"flag"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestPresets(t *testing.T) {
	tests := []struct {
		name string
		size int
		want Config
	}{
		{SimCLRCIFAR, 32, Config{Preset: SimCLRCIFAR, Size: 32, CropScale: [2]float64{0.08, 1}, CropRatio: [2]float64{0.75, 4.0 / 3},
			FlipP: 0.5, JitterP: 0.8, Brightness: 0.4, Contrast: 0.4, Saturation: 0.4, Hue: 0.1, GrayP: 0.2,
			BlurSigma: [2]float64{0.1, 2}, SolarizeThreshold: 128}},
		{SimCLRImageNet, 224, Config{Preset: SimCLRImageNet, Size: 224, CropScale: [2]float64{0.08, 1}, CropRatio: [2]float64{0.75, 4.0 / 3},
			FlipP: 0.5, JitterP: 0.8, Brightness: 0.8, Contrast: 0.8, Saturation: 0.8, Hue: 0.2, GrayP: 0.2,
			BlurP: PerView{0.5, 0.5}, BlurSigma: [2]float64{0.1, 2}, SolarizeThreshold: 128}},
		{DCLPaper, 32, Config{Preset: DCLPaper, Size: 32, CropScale: [2]float64{0.08, 1}, CropRatio: [2]float64{0.75, 4.0 / 3},
			FlipP: 0.5, JitterP: 0.8, Brightness: 0.8, Contrast: 0.8, Saturation: 0.8, Hue: 0.2, GrayP: 0.2,
			BlurP: PerView{0.5, 0.5}, BlurSigma: [2]float64{0.1, 2}, SolarizeThreshold: 128}},
		{BYOL, 224, Config{Preset: BYOL, Size: 224, CropScale: [2]float64{0.08, 1}, CropRatio: [2]float64{0.75, 4.0 / 3},
			FlipP: 0.5, JitterP: 0.8, Brightness: 0.4, Contrast: 0.4, Saturation: 0.2, Hue: 0.1, GrayP: 0.2,
			BlurP: PerView{1, 0.1}, BlurSigma: [2]float64{0.1, 2}, SolarizeP: PerView{0, 0.2}, SolarizeThreshold: 128}},
		{None, 96, Config{Preset: None, Eval: true, Size: 96, CropScale: [2]float64{0.08, 1}, CropRatio: [2]float64{0.75, 4.0 / 3},
			BlurSigma: [2]float64{0.1, 2}, SolarizeThreshold: 128}},
	}
	for _, tt := range tests {
		got, err := Preset(tt.name, tt.size)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Preset(%s, %d) =\n%+v, want\n%+v", tt.name, tt.size, got, tt.want)
		}
	}
	if _, err := Preset("simclr", 32); err == nil || !strings.Contains(err.Error(), "simclr-cifar") {
		t.Errorf("unknown preset: error %v should list the presets", err)
	}
	if _, err := Preset(SimCLRCIFAR, 0); err == nil || !strings.Contains(err.Error(), "view-size") {
		t.Errorf("size 0: error %v", err)
	}
}

func TestDerivedSizes(t *testing.T) {
	tests := []struct {
		size, resize, kernel   int
		wantResize, wantKernel int
	}{
		{224, 0, 0, 256, 23}, {96, 0, 0, 96, 9}, {32, 0, 0, 32, 3}, {28, 0, 0, 28, 3},
		{5, 0, 0, 5, 1}, {128, 0, 0, 146, 13}, {224, 300, 7, 300, 7},
	}
	for _, tt := range tests {
		c := Config{Size: tt.size, Resize: tt.resize, BlurKernel: tt.kernel}
		if got := c.EvalResize(); got != tt.wantResize {
			t.Errorf("size %d resize %d: EvalResize %d, want %d", tt.size, tt.resize, got, tt.wantResize)
		}
		if got := c.BlurKernelSize(); got != tt.wantKernel {
			t.Errorf("size %d kernel %d: BlurKernelSize %d, want %d", tt.size, tt.kernel, got, tt.wantKernel)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		give func(*Config)
		want string // substring of the error; "" for valid
	}{
		{"preset is valid", func(*Config) {}, ""},
		{"size 0", func(c *Config) { c.Size = 0 }, "view-size 0"},
		{"size negative", func(c *Config) { c.Size = -3 }, "view-size -3"},
		{"size huge", func(c *Config) { c.Size = MaxSize + 1 }, "view-size"},
		{"scale min 0", func(c *Config) { c.CropScale = [2]float64{0, 1} }, "crop-scale 0,1"},
		{"scale above 1", func(c *Config) { c.CropScale = [2]float64{0.5, 1.5} }, "crop-scale 0.5,1.5"},
		{"scale min > max", func(c *Config) { c.CropScale = [2]float64{0.9, 0.2} }, "min is greater than max"},
		{"scale NaN", func(c *Config) { c.CropScale = [2]float64{math.NaN(), 1} }, "crop-scale"},
		{"scale equal", func(c *Config) { c.CropScale = [2]float64{1, 1} }, ""},
		{"ratio 0", func(c *Config) { c.CropRatio = [2]float64{0, 1} }, "crop-ratio"},
		{"ratio min > max", func(c *Config) { c.CropRatio = [2]float64{2, 1} }, "crop-ratio 2,1: min is greater"},
		{"ratio inf", func(c *Config) { c.CropRatio = [2]float64{1, math.Inf(1)} }, "crop-ratio"},
		{"flip-p above 1", func(c *Config) { c.FlipP = 1.5 }, "flip-p 1.5"},
		{"jitter-p negative", func(c *Config) { c.JitterP = -0.1 }, "jitter-p -0.1"},
		{"gray-p NaN", func(c *Config) { c.GrayP = math.NaN() }, "gray-p NaN"},
		{"blur-p view 1", func(c *Config) { c.BlurP = PerView{0.5, 2} }, "blur-p 0.5,2: a probability must be in [0, 1] (view 1)"},
		{"solarize-p view 0", func(c *Config) { c.SolarizeP = PerView{-1, 0} }, "solarize-p -1,0: a probability must be in [0, 1] (view 0)"},
		{"brightness negative", func(c *Config) { c.Brightness = -0.4 }, "brightness -0.4"},
		{"contrast huge", func(c *Config) { c.Contrast = 1000 }, "contrast 1000"},
		{"saturation NaN", func(c *Config) { c.Saturation = math.NaN() }, "saturation NaN"},
		{"hue above 0.5", func(c *Config) { c.Hue = 0.6 }, "hue 0.6"},
		{"sigma 0", func(c *Config) { c.BlurSigma = [2]float64{0, 2} }, "blur-sigma 0,2"},
		{"sigma min > max", func(c *Config) { c.BlurSigma = [2]float64{3, 2} }, "blur-sigma 3,2: min is greater"},
		{"kernel even", func(c *Config) { c.BlurKernel = 22 }, "blur-kernel 22"},
		{"kernel negative", func(c *Config) { c.BlurKernel = -1 }, "blur-kernel -1"},
		{"kernel odd", func(c *Config) { c.BlurKernel = 23 }, ""},
		{"threshold", func(c *Config) { c.SolarizeThreshold = 300 }, "solarize-threshold 300"},
		{"resize below size", func(c *Config) { c.Resize = 16 }, "eval-resize 16: must be at least view-size 32"},
		{"resize negative", func(c *Config) { c.Resize = -1 }, "eval-resize -1"},
		{"unknown preset name", func(c *Config) { c.Preset = "mine" }, `preset "mine"`},
		{"several at once", func(c *Config) { c.FlipP, c.Hue = 2, 1 }, "flip-p 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustPreset(t, SimCLRCIFAR, 32)
			tt.give(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
			if tt.want != "" {
				if _, err := New(c); err == nil {
					t.Error("New accepted an invalid config")
				}
			}
		})
	}
	// Both problems are reported.
	c := mustPreset(t, SimCLRCIFAR, 32)
	c.FlipP, c.Hue = 2, 1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "hue 1") {
		t.Errorf("error %v should name every bad field", err)
	}
}

func TestFlags(t *testing.T) {
	fs := flag.NewFlagSet("preprocess", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := RegisterFlags(fs, "")
	err := fs.Parse([]string{"--crop-scale=0.2,0.9", "--blur-p", "1,0.1", "--hue=0.05", "--view-size=64", "--solarize-p=0.3"})
	if err != nil {
		t.Fatal(err)
	}
	c := mustPreset(t, SimCLRCIFAR, 32)
	if err := o.Apply(&c); err != nil {
		t.Fatal(err)
	}
	want := mustPreset(t, SimCLRCIFAR, 32)
	want.CropScale, want.BlurP, want.Hue, want.Size, want.SolarizeP = [2]float64{0.2, 0.9}, PerView{1, 0.1}, 0.05, 64, PerView{0.3, 0.3}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("after flags:\n%+v, want\n%+v", c, want)
	}
	if got := strings.Join(o.Given(), " "); got != "crop-scale=0.2,0.9 blur-p=1,0.1 hue=0.05 view-size=64 solarize-p=0.3" {
		t.Errorf("Given() = %q", got)
	}

	// Syntax errors are caught while parsing, range errors by Apply.
	for _, tt := range []struct{ args, want string }{
		{"--crop-scale=0.2", "want 2 comma-separated numbers, got 1"},
		{"--crop-scale=a,b", `"a" is not a number`},
		{"--blur-p=1,2,3", "want 1 to 2 comma-separated numbers, got 3"},
		{"--view-size=3.5", "3.5 is not a whole number"},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		RegisterFlags(fs, "aug-")
		err := fs.Parse([]string{strings.Replace(tt.args, "--", "--aug-", 1)})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.args, err, tt.want)
		}
	}
	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	o = RegisterFlags(fs, "")
	if err := fs.Parse([]string{"--flip-p=3"}); err != nil {
		t.Fatal(err)
	}
	c = mustPreset(t, SimCLRCIFAR, 32)
	if err := o.Apply(&c); err == nil || !strings.Contains(err.Error(), "flip-p 3") {
		t.Errorf("Apply: error %v, want flip-p out of range", err)
	}

	// Every flag has usage text and the names are unique.
	seen := map[string]bool{}
	for _, p := range Params() {
		if p.Doc == "" || seen[p.Name] || fs.Lookup(p.Name) == nil {
			t.Errorf("param %q: empty usage, duplicate, or not registered", p.Name)
		}
		seen[p.Name] = true
	}
}

// String lists every field as flags; applying them to the bare preset reproduces the Config.
func TestStringRoundTrip(t *testing.T) {
	c := mustPreset(t, BYOL, 96)
	c.CropScale, c.BlurKernel, c.Hue, c.GrayP = [2]float64{0.123456789, 0.987654321}, 5, 0.1/3, 1.0/7
	s := c.String()
	if !strings.HasPrefix(s, "preset=byol view-size=96 ") || !strings.Contains(s, "blur-p=1,0.1") {
		t.Errorf("String() = %q", s)
	}
	back := mustPreset(t, BYOL, 96)
	for _, kv := range strings.Fields(s)[1:] {
		name, v, _ := strings.Cut(kv, "=")
		found := false
		for _, p := range Params() {
			if p.Name == name {
				found = true
				if err := p.Set(&back, v); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !found {
			t.Fatalf("String() names unknown param %q", name)
		}
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip through String():\n%+v, want\n%+v", back, c)
	}
}

// Every parameter's check is its declaration's: Validate refuses an out-of-range value of
// each, naming it as its flag and the key of a config's augment_overrides.
func TestEveryParamIsCheckedByItsDeclaration(t *testing.T) {
	for _, p := range Params() {
		c := mustPreset(t, SimCLRCIFAR, 32)
		bad := "-1000000"
		if p.Value != nil {
			bad = "-1,-1"
		}
		if err := p.Set(&c, bad); err != nil {
			t.Fatal(err)
		}
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), p.Name+" "+p.Get(c)+": ") {
			t.Errorf("%s=%s: Validate = %v, want the declaration's check naming it", p.Name, bad, err)
		}
	}
}
