package augment

import (
	"fmt"
	"math"
	"testing"
)

func mustPreset(t testing.TB, name string, size int) Config {
	t.Helper()
	c, err := Preset(name, size)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// RandomResizedCrop boxes over many draws follow torchvision's sampling: area fraction in
// [0.08, 1], ratio in [3/4, 4/3] up to rounding, log-uniform ratio, uniform position.
func TestCropStatistics(t *testing.T) {
	cfg := mustPreset(t, SimCLRImageNet, 224)
	const draws = 20000
	for _, tt := range []struct{ h, w int }{{375, 500}, {1000, 1000}} {
		var smallN int
		var smallFrac, smallAbsLog, logSum, posSum float64
		var posN int
		for i := range draws {
			r := NewRand(1, fmt.Sprint(i), 0, 0)
			top, left, ch, cw := cfg.sampleCrop(tt.h, tt.w, r)
			if top < 0 || left < 0 || top+ch > tt.h || left+cw > tt.w || ch < 1 || cw < 1 {
				t.Fatalf("%dx%d: crop %dx%d at (%d,%d) does not fit", tt.h, tt.w, ch, cw, top, left)
			}
			frac := float64(ch*cw) / float64(tt.h*tt.w)
			// Rounding each side to an integer moves area and ratio by up to half a pixel.
			if frac < 0.08*(1-1.0/float64(min(ch, cw))) || frac > 1 {
				t.Fatalf("%dx%d: crop %dx%d has area fraction %g", tt.h, tt.w, ch, cw, frac)
			}
			lo := (float64(cw) - 0.5) / (float64(ch) + 0.5)
			hi := (float64(cw) + 0.5) / (float64(ch) - 0.5)
			if hi < 3.0/4 || lo > 4.0/3 {
				t.Fatalf("%dx%d: crop %dx%d has ratio %g", tt.h, tt.w, ch, cw, float64(cw)/float64(ch))
			}
			logSum += math.Log(float64(cw) / float64(ch))
			if tt.h > ch && tt.w > cw {
				posSum += float64(top)/float64(tt.h-ch) + float64(left)/float64(tt.w-cw)
				posN += 2
			}
			// Crops below half the area always fit the square image at the first attempt, so
			// there the draws are the raw uniform scale and log-uniform ratio.
			if tt.h == tt.w && frac < 0.45 {
				smallN++
				smallFrac += frac
				smallAbsLog += math.Abs(math.Log(float64(cw) / float64(ch)))
			}
		}
		if m := posSum / float64(posN); math.Abs(m-0.5) > 0.01 {
			t.Errorf("%dx%d: mean relative crop position %g, want 0.5", tt.h, tt.w, m)
		}
		if tt.h != tt.w {
			continue
		}
		if m := logSum / draws; math.Abs(m) > 0.005 {
			t.Errorf("mean log ratio %g on a square image, want 0 (log-uniform, symmetric)", m)
		}
		if smallN < draws/4 {
			t.Fatalf("only %d small crops in %d draws", smallN, draws)
		}
		if m := smallFrac / float64(smallN); math.Abs(m-(0.08+0.45)/2) > 0.005 {
			t.Errorf("mean area fraction of crops below 0.45 is %g, want %g (uniform)", m, (0.08+0.45)/2)
		}
		if m, want := smallAbsLog/float64(smallN), math.Log(4.0/3)/2; math.Abs(m-want) > 0.005 {
			t.Errorf("mean |log ratio| %g, want %g (log-uniform on [log 3/4, log 4/3])", m, want)
		}
	}
}

// When no attempt fits, torchvision falls back to the centre crop clamped to the ratio range.
func TestCropFallback(t *testing.T) {
	cfg := mustPreset(t, SimCLRCIFAR, 32)
	tests := []struct {
		h, w              int
		top, left, ch, cw int
	}{
		{h: 1, w: 1000, top: 0, left: 499, ch: 1, cw: 1}, // ratio clamped to 4/3: round(1·4/3) = 1
		{h: 1000, w: 1, top: 499, left: 0, ch: 1, cw: 1}, // round(1/(3/4)) = 1
		{h: 3, w: 1000, top: 0, left: 498, ch: 3, cw: 4}, // round(3·4/3) = 4
		{h: 1000, w: 6, top: 496, left: 0, ch: 8, cw: 6}, // round(6/(3/4)) = 8
		{h: 1, w: 1, top: 0, left: 0, ch: 1, cw: 1},
	}
	for _, tt := range tests {
		for i := range 50 {
			top, left, ch, cw := cfg.sampleCrop(tt.h, tt.w, NewRand(uint64(i), "k", 0, 0))
			if top != tt.top || left != tt.left || ch != tt.ch || cw != tt.cw {
				t.Fatalf("%dx%d: crop %dx%d at (%d,%d), want %dx%d at (%d,%d)",
					tt.h, tt.w, ch, cw, top, left, tt.ch, tt.cw, tt.top, tt.left)
			}
		}
	}
	// An extreme ratio range whose fallback would be empty keeps one pixel.
	cfg.CropRatio = [2]float64{50, 100}
	if _, _, ch, cw := cfg.sampleCrop(1000, 3, NewRand(1, "k", 0, 0)); ch < 1 || cw < 1 {
		t.Errorf("empty fallback crop %dx%d", ch, cw)
	}
}

// Every random choice happens at its configured rate.
func TestPlanRates(t *testing.T) {
	const draws = 10000
	byol := mustPreset(t, BYOL, 96)
	type rates struct{ flip, jitter, gray, blur, solarize float64 }
	for _, tt := range []struct {
		cfg  Config
		view int
		want rates
	}{
		{mustPreset(t, SimCLRCIFAR, 32), 0, rates{0.5, 0.8, 0.2, 0, 0}},
		{mustPreset(t, SimCLRImageNet, 224), 1, rates{0.5, 0.8, 0.2, 0.5, 0}},
		{byol, 0, rates{0.5, 0.8, 0.2, 1, 0}},
		{byol, 1, rates{0.5, 0.8, 0.2, 0.1, 0.2}},
	} {
		var got rates
		perms := map[[4]JitterOp]int{}
		for i := range draws {
			p := tt.cfg.Sample(100, 120, tt.view, NewRand(3, fmt.Sprint(i), 0, tt.view))
			b := func(v bool) float64 {
				if v {
					return 1.0 / draws
				}
				return 0
			}
			got.flip += b(p.Flip)
			got.jitter += b(p.Jitter)
			got.gray += b(p.Gray)
			got.blur += b(p.Blur)
			got.solarize += b(p.Solarize)
			if p.Jitter {
				perms[p.Order]++
				check := func(name string, v, lo, hi float64) {
					if v < lo || v >= hi {
						t.Fatalf("%s factor %g outside [%g, %g)", name, v, lo, hi)
					}
				}
				check("brightness", p.Brightness, 1-tt.cfg.Brightness, 1+tt.cfg.Brightness)
				check("contrast", p.Contrast, 1-tt.cfg.Contrast, 1+tt.cfg.Contrast)
				check("saturation", p.Saturation, 1-tt.cfg.Saturation, 1+tt.cfg.Saturation)
				check("hue", p.Hue, -tt.cfg.Hue, tt.cfg.Hue)
			}
			if p.Blur && (p.Sigma < 0.1 || p.Sigma >= 2) {
				t.Fatalf("sigma %g outside [0.1, 2)", p.Sigma)
			}
		}
		for _, c := range []struct {
			name      string
			got, want float64
		}{{"flip", got.flip, tt.want.flip}, {"jitter", got.jitter, tt.want.jitter}, {"gray", got.gray, tt.want.gray},
			{"blur", got.blur, tt.want.blur}, {"solarize", got.solarize, tt.want.solarize}} {
			if math.Abs(c.got-c.want) > 0.02 {
				t.Errorf("%s view %d: %s rate %.4f, want %g ± 0.02", tt.cfg.Preset, tt.view, c.name, c.got, c.want)
			}
		}
		if len(perms) != 24 {
			t.Errorf("%d jitter orders seen, want all 24", len(perms))
		}
		for perm, n := range perms {
			if want := got.jitter * draws / 24; math.Abs(float64(n)-want) > 0.3*want {
				t.Errorf("jitter order %v seen %d times, want about %.0f", perm, n, want)
			}
		}
	}
}

// A parameter set to 0 is not drawn (as torchvision's None), and the evaluation Config draws
// nothing.
func TestPlanDisabledAndEval(t *testing.T) {
	cfg := mustPreset(t, SimCLRCIFAR, 32)
	cfg.JitterP, cfg.Brightness, cfg.Hue = 1, 0, 0
	for i := range 100 {
		p := cfg.Sample(32, 32, 0, NewRand(1, fmt.Sprint(i), 0, 0))
		if p.Brightness != 1 || p.Hue != 0 || p.Contrast == 1 {
			t.Fatalf("plan %+v: brightness and hue should stay neutral, contrast drawn", p)
		}
	}
	eval := mustPreset(t, None, 32)
	if p := eval.Sample(40, 50, 1, NewRand(1, "k", 0, 1)); p.Flip || p.Jitter || p.Gray || p.Blur || p.Solarize {
		t.Errorf("evaluation plan %+v has random steps", p)
	}
}
