package analysis

import (
	"fmt"
	"math"
	"slices"
)

// Spread summarises one figure over the training seeds of a cell (runs that differ only by
// their seed): how many, their mean, sample standard deviation and range, and the values.
type Spread struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	// SD is the sample standard deviation (divisor n − 1); 0 for a single seed, where it
	// is unknown rather than zero (N says which).
	SD     float64   `json:"sd"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Values []float64 `json:"values"`
}

// SpreadOf summarises values (one per seed); the zero Spread for none.
func SpreadOf(values []float64) Spread {
	s := Spread{N: len(values), Values: slices.Clone(values)}
	if s.N == 0 {
		return s
	}
	s.Min, s.Max = slices.Min(values), slices.Max(values)
	for _, v := range values {
		s.Mean += v
	}
	s.Mean /= float64(s.N)
	if s.N > 1 {
		var ss float64
		for _, v := range values {
			ss += (v - s.Mean) * (v - s.Mean)
		}
		s.SD = math.Sqrt(ss / float64(s.N-1))
	}
	return s
}

// Verdict is what a difference between two cells may be called.
type Verdict string

// The verdicts of CompareSeeds.
const (
	// Gain and Loss: the difference of the means exceeds its 95% interval's half-width.
	Gain Verdict = "gain"
	Loss Verdict = "loss"
	// WithinNoise: it does not; the seeds vary as much as the cells differ.
	WithinNoise Verdict = "within seed noise"
	// TooFewSeeds: a cell has one seed, so nothing says how much the figure varies.
	TooFewSeeds Verdict = "one seed: no claim"
	// NoSpread: every seed of both cells gave the same figure, which says nothing about how
	// it varies either.
	NoSpread Verdict = "no spread between seeds: no claim"
)

// SeedRule states how CompareSeeds decides, for reports.
const SeedRule = "A difference between two cells (the mean of B's seeds minus the mean of A's) is called a gain, " +
	"or a loss, only when it is larger than the half-width of its 95% confidence interval from the seeds: " +
	"t(0.975, ν)·√(s_A²/n_A + s_B²/n_B), with s the seeds' sample standard deviation, n their number and " +
	"ν Welch's degrees of freedom (rounded down). Otherwise it is \"within seed noise\". " +
	"With one seed in either cell no claim is made."

// Difference is cell B against cell A for one figure.
type Difference struct {
	// Diff is B's mean minus A's.
	Diff float64 `json:"difference"`
	// HalfWidth is the half-width of Diff's 95% confidence interval (0 where it cannot be
	// estimated), with DF Welch's degrees of freedom.
	HalfWidth float64 `json:"half_width,omitempty"`
	DF        float64 `json:"df,omitempty"`
	Verdict   Verdict `json:"verdict"`
}

// CompareSeeds compares B with A by SeedRule (Welch's two-sided 95% interval).
func CompareSeeds(a, b Spread) Difference {
	d := Difference{Diff: b.Mean - a.Mean}
	if a.N < 2 || b.N < 2 {
		d.Verdict = TooFewSeeds
		return d
	}
	va, vb := a.SD*a.SD/float64(a.N), b.SD*b.SD/float64(b.N)
	if va+vb == 0 {
		d.Verdict = NoSpread
		return d
	}
	// Welch–Satterthwaite.
	d.DF = (va + vb) * (va + vb) / (va*va/float64(a.N-1) + vb*vb/float64(b.N-1))
	d.HalfWidth = StudentT975(d.DF) * math.Sqrt(va+vb)
	switch {
	case d.Diff > d.HalfWidth:
		d.Verdict = Gain
	case d.Diff < -d.HalfWidth:
		d.Verdict = Loss
	default:
		d.Verdict = WithinNoise
	}
	return d
}

// String is the difference as a report shows it: "+1.70 ± 2.31 (ν = 2): within seed noise".
func (d Difference) String() string {
	switch d.Verdict {
	case TooFewSeeds, NoSpread:
		return fmt.Sprintf("%+.2f: %s", d.Diff, d.Verdict)
	}
	return fmt.Sprintf("%+.2f ± %.2f (ν = %d): %s", d.Diff, d.HalfWidth, int(math.Floor(d.DF)), d.Verdict)
}

// t975 are Student's t quantiles t(0.975, ν) for ν = 1 … 30 (any statistics table).
var t975 = []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// StudentT975 is t(0.975, ν), the two-sided 95% quantile of Student's t, for ν rounded down
// (which widens the interval, never narrows it); ν below 1 counts as 1. Above 30 degrees of
// freedom it is the Cornish–Fisher expansion around the normal quantile, within 1e-3 there.
func StudentT975(df float64) float64 {
	n := int(math.Floor(df))
	if n < 1 || math.IsNaN(df) {
		n = 1
	}
	if n <= len(t975) {
		return t975[n-1]
	}
	const z = 1.959963984540054
	v := float64(n)
	z3, z5 := z*z*z, z*z*z*z*z
	return z + (z3+z)/(4*v) + (5*z5+16*z3+3*z)/(96*v*v)
}
