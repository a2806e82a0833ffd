package analysis

import (
	"math"
	"strings"
	"testing"
)

func TestSpreadOf(t *testing.T) {
	s := SpreadOf([]float64{78.6, 79.2, 79.3})
	if s.N != 3 || math.Abs(s.Mean-79.0333333) > 1e-6 || math.Abs(s.SD-0.3785939) > 1e-6 || s.Min != 78.6 || s.Max != 79.3 {
		t.Errorf("SpreadOf = %+v, want n 3, mean 79.0333, sd 0.3786, range 78.6–79.3", s)
	}
	if one := SpreadOf([]float64{80}); one.N != 1 || one.Mean != 80 || one.SD != 0 {
		t.Errorf("one seed: %+v", one)
	}
	if none := SpreadOf(nil); none.N != 0 {
		t.Errorf("no seed: %+v", none)
	}
}

// The rule's verdicts, with the README's three-seed demo figures (kNN top-1 of InfoNCE and
// DCL): a difference of 0.13 points against seeds that vary by half a point is noise.
func TestCompareSeeds(t *testing.T) {
	tests := []struct {
		name string
		a, b []float64
		want Verdict
		// wantHalf is the interval's half-width, where the test knows it (0: not checked).
		wantHalf float64
	}{
		{"the demo's three seeds", []float64{78.6, 79.2, 79.3}, []float64{79.2, 79.7, 78.6}, WithinNoise, 3.182 * 0.3858840},
		{"a gap far above the seeds' spread", []float64{70, 71, 70.5}, []float64{80, 81, 80.5}, Gain, 0},
		{"the other way", []float64{80, 81, 80.5}, []float64{70, 71, 70.5}, Loss, 0},
		// Two seeds each with equal spreads: ν = 2, t = 4.303; a 1.7-point gap with seeds
		// 0.4 apart exceeds its 1.22 half-width, one with seeds 1.4 apart does not.
		{"two seeds each", []float64{78.0, 78.4}, []float64{79.7, 80.1}, Gain, 4.303 * 0.2828427},
		{"two seeds, wider", []float64{78.0, 79.4}, []float64{79.7, 80.1}, WithinNoise, 0},
		{"one seed", []float64{78.0}, []float64{79.7, 80.1}, TooFewSeeds, 0},
		{"no spread", []float64{78, 78}, []float64{79, 79}, NoSpread, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := CompareSeeds(SpreadOf(tt.a), SpreadOf(tt.b))
			if d.Verdict != tt.want {
				t.Errorf("verdict %q (%s), want %q", d.Verdict, d, tt.want)
			}
			if tt.wantHalf != 0 && math.Abs(d.HalfWidth-tt.wantHalf) > 1e-4 {
				t.Errorf("half-width %v, want %v", d.HalfWidth, tt.wantHalf)
			}
		})
	}
	s := CompareSeeds(SpreadOf([]float64{78.6, 79.2, 79.3}), SpreadOf([]float64{79.2, 79.7, 78.6})).String()
	if !strings.HasPrefix(s, "+0.13 ± 1.23 (ν = 3): within seed noise") {
		t.Errorf("String = %q", s)
	}
}

// Student's t(0.975, ν) against a table's values, through the switch from the table to the
// expansion at 30 degrees of freedom.
func TestStudentT975(t *testing.T) {
	for _, tt := range []struct{ df, want float64 }{
		{0.3, 12.706}, {1, 12.706}, {2.9, 4.303}, {3, 3.182}, {10, 2.228}, {30, 2.042}, {40, 2.021}, {60, 2.000}, {120, 1.980}, {1e6, 1.960},
	} {
		if got := StudentT975(tt.df); math.Abs(got-tt.want) > 1e-3 {
			t.Errorf("t(0.975, %v) = %v, want %v", tt.df, got, tt.want)
		}
	}
}
