package verify

import (
	"fmt"
	"math"
	"strings"

	"github.com/dcl-beam/dcl-beam/trainstep"
)

// The agreement check compares one training step's loss and each gradient's checksums (sum,
// sum of squares, largest element; trainstep.GradientReport) on the backend under test with a
// CPU reference. Its tolerances are derived from the rounding of this very step, measured in
// the same run, because a priori bounds cannot serve here:
//
//   - The batch-norm scale and offset gradients are sums over every position of the batch
//     (65,536 terms in the stem of resnet18-cifar at batch 32) with heavy cancellation, at the
//     end of ~20 layers forward and ~20 back: they are ill-conditioned. Moving every weight
//     by one float32 ulp moves their sums of squares by thousands of ulps, and two correct
//     float32 algorithms of the step (the CPU's direct and Winograd convolutions) differ by
//     as much as the H200's first agreement run did, which failed tolerances set a priori
//     with no TF32 needed to explain it (BENCHMARKS.md, "Rounding floors of the agreement
//     check", has the figures and the command).
//   - To first order, a result's error is linear in the rounding of each operation
//     (Σᵢ κᵢ·δᵢ, δᵢ the relative rounding of operation i): any float32 implementation of the
//     step, whatever its algorithms (cuDNN's implicit GEMM, Winograd, FFT; cuBLAS's split-K),
//     rounds each operation at float32's unit and lands within a small multiple of the
//     spread two float32 algorithms show; one that rounds product operands to TF32 (10-bit
//     mantissa, relative 2⁻¹¹ ≈ 4.9e-4 per operand against 2⁻²⁴ ≈ 6e-8) lands near where a
//     TF32 computation lands.
//
// So, in the agreement phase, the CPU computes the step three times (reports in float32):
//
//   - R, the reference: direct convolutions on one thread, the plainest float32 algorithm;
//   - F, Winograd where the CPU has it: |F − R| is the float32 floor, what float32 rounding
//     alone does to this step;
//   - T, direct convolutions with every product's operands rounded to TF32 (cpu.RoundTF32):
//     |T − R| is the TF32 floor, what TF32 does to it.
//
// For each measure the decision statistic is the root mean square over all gradients of the
// relative errors (Spread), so that no single cancelling sum decides alone, and
//
//	float32 row: spread(G − R) ≤ Headroom · max(spread(F − R), a priori float32 bound)
//	tf32 row:    spread(G − R) ≤ Headroom · max(spread(T − R), a priori TF32 bound)
//
// Headroom = 4 leaves room for GPU algorithms that round more than the CPU's (larger
// Winograd tiles, FFT), while TF32's spread on this step is an order of magnitude above
// float32's (measured in every run: the report's ratios; TestTF32CannotPassTheFloat32Row
// fails below twice Headroom): a TF32 computation cannot pass the float32 row.
//
// A single measured floor can be small by chance (the loss is one number) or vanish (F equals
// R where the CPU has no Winograd for the model: small widths, CPUs without its kernels), so
// no tolerance is below Headroom times the a priori bound of the row's arithmetic: the
// probabilistic error of a dot product of K terms whose operands are rounded to u_op and
// whose sum is accumulated in float32, (2·u_op + √K·u) relative (Higham and Mary, SIAM J.
// Sci. Comput. 41(5), 2019; u = 2⁻²⁴; u_op = u in float32, 2⁻¹¹ in TF32), grown as a
// random walk over the step's product layers: √(2D) of them forward and back for the
// gradients, √D for the loss, with K and D read off the model's weights (ProductShape).
// TF32 rounding is discontinuous, so a GPU's TF32 result, from other algorithms, lies as far
// from the CPU's emulation as the emulation lies from float32: the a priori TF32 bound, not
// the one measured sample, carries the tf32 row where the sample is small.
const Headroom = 4

// unitRoundoff is float32's unit roundoff, 2⁻²⁴.
var unitRoundoff = math.Exp2(-24)

// Spread is how far one gradient report lies from another, per measure: the loss's relative
// error, and the root mean square over variables of each gradient measure's error.
type Spread struct {
	// Loss is |Δloss| / |loss|.
	Loss float64 `json:"loss_rel"`
	// SumSquares is the RMS of each gradient's sum of squares' relative error.
	SumSquares float64 `json:"sum_squares_rel"`
	// MaxAbs is the RMS of each gradient's largest element's relative error.
	MaxAbs float64 `json:"max_abs_rel"`
	// Sum is the RMS of |Δsum| / (‖g‖₂·√n), each gradient's sum error against the size of a
	// sum of n terms of that norm (sums cancel, so a relative error would be noise).
	Sum float64 `json:"sum_normed"`
}

// scaled is s with each measure multiplied by k, never below floor's.
func (s Spread) scaled(k float64, floor Spread) Spread {
	return Spread{Loss: k * max(s.Loss, floor.Loss), SumSquares: k * max(s.SumSquares, floor.SumSquares),
		MaxAbs: k * max(s.MaxAbs, floor.MaxAbs), Sum: k * max(s.Sum, floor.Sum)}
}

// ratio is how many times s is of floor, measure by measure, the largest (0 where floor is 0).
func (s Spread) ratio(floor Spread) float64 {
	r := 0.0
	for _, p := range [][2]float64{{s.Loss, floor.Loss}, {s.SumSquares, floor.SumSquares}, {s.MaxAbs, floor.MaxAbs}, {s.Sum, floor.Sum}} {
		if p[1] > 0 {
			r = max(r, p[0]/p[1])
		}
	}
	return r
}

// ProductShape is what the a priori float32 floor needs of a model: the product layers on
// its longest path (convolutions and dense layers, shortcuts aside, plus the loss's
// similarities) and the most terms one of their dot products sums.
type ProductShape struct {
	Depth int `json:"depth"`
	FanIn int `json:"fan_in"`
}

// productShape reads a step's model weights: a convolution kernel [kh, kw, cin, cout] sums
// kh·kw·cin terms per output, a dense weight [in, out] in.
func productShape(s *trainstep.Step) ProductShape {
	ps := ProductShape{Depth: 1, FanIn: s.Config().Model.ProjectionDim} // the similarity matrix
	for v := range s.Store().IterVariables() {
		if !v.Trainable || !strings.HasSuffix(v.Path(), "/weights") {
			continue
		}
		d := v.Shape().Dimensions
		k := 0
		switch len(d) {
		case 4:
			k = d[0] * d[1] * d[2]
		case 2:
			k = d[0]
		default:
			continue
		}
		ps.FanIn = max(ps.FanIn, k)
		if !strings.Contains(v.Path(), "shortcut") {
			ps.Depth++
		}
	}
	return ps
}

// tf32Roundoff is TF32's unit roundoff, 2⁻¹¹ (a 10-bit mantissa, rounded to nearest).
var tf32Roundoff = math.Exp2(-11)

// AprioriFloor is the a priori spread of a step of this shape at precision (float32 or
// tf32; see Headroom).
func (ps ProductShape) AprioriFloor(precision trainstep.Precision) Spread {
	operand := unitRoundoff
	if precision == trainstep.TF32 {
		operand = tf32Roundoff
	}
	perLayer := 2*operand + math.Sqrt(float64(ps.FanIn))*unitRoundoff
	grad := math.Sqrt(2*float64(ps.Depth)) * perLayer
	return Spread{Loss: math.Sqrt(float64(ps.Depth)) * perLayer, SumSquares: 2 * grad, MaxAbs: grad, Sum: grad}
}

// relErr is |a − b| relative to the larger of the two; +Inf when either is NaN.
func relErr(a, b float64) float64 {
	d := math.Abs(a - b)
	if math.IsNaN(d) {
		return math.Inf(1)
	}
	s := math.Max(math.Abs(a), math.Abs(b))
	if s == 0 {
		return 0
	}
	return d / s
}

// VariableDiff is one variable's gradient on both sides.
type VariableDiff struct {
	Name          string  `json:"name"`
	Size          int     `json:"size"`
	SumSquaresRef float64 `json:"sum_squares_reference"`
	SumSquares    float64 `json:"sum_squares"`
	SumSqRelErr   float64 `json:"sum_squares_rel_err"`
	MaxAbsRelErr  float64 `json:"max_abs_rel_err"`
	SumErrNormed  float64 `json:"sum_err_normed"`
}

// diff compares got with ref variable by variable. It returns the differences, their spread,
// and what does not match at all (other variables, NaNs).
func diff(ref, got trainstep.GradientReport) ([]VariableDiff, Spread, []string) {
	var problems []string
	if math.IsNaN(got.Loss) || math.IsInf(got.Loss, 0) {
		problems = append(problems, fmt.Sprintf("loss is %v", got.Loss))
	}
	if len(ref.Gradients) != len(got.Gradients) {
		problems = append(problems, fmt.Sprintf("%d gradients vs %d on the reference", len(got.Gradients), len(ref.Gradients)))
	}
	var diffs []VariableDiff
	var ss, ma, su float64
	for i := range min(len(ref.Gradients), len(got.Gradients)) {
		a, b := ref.Gradients[i], got.Gradients[i]
		if a.Name != b.Name || a.Size != b.Size {
			problems = append(problems, fmt.Sprintf("gradient %d is %s (%d) vs %s (%d) on the reference", i, b.Name, b.Size, a.Name, a.Size))
			continue
		}
		d := VariableDiff{Name: a.Name, Size: a.Size, SumSquaresRef: a.SumSquares, SumSquares: b.SumSquares,
			SumSqRelErr: relErr(a.SumSquares, b.SumSquares), MaxAbsRelErr: relErr(a.MaxAbs, b.MaxAbs)}
		if scale := math.Sqrt(a.SumSquares * float64(a.Size)); scale > 0 {
			d.SumErrNormed = math.Abs(a.Sum-b.Sum) / scale
		} else if a.Sum != b.Sum {
			d.SumErrNormed = math.Inf(1)
		}
		if math.IsNaN(b.Sum) || math.IsNaN(b.SumSquares) || math.IsNaN(b.MaxAbs) {
			problems = append(problems, fmt.Sprintf("%s: NaN in the gradient", b.Name))
			d.SumSqRelErr, d.MaxAbsRelErr, d.SumErrNormed = math.Inf(1), math.Inf(1), math.Inf(1)
		}
		diffs = append(diffs, d)
		ss += d.SumSqRelErr * d.SumSqRelErr
		ma += d.MaxAbsRelErr * d.MaxAbsRelErr
		su += d.SumErrNormed * d.SumErrNormed
	}
	s := Spread{Loss: relErr(ref.Loss, got.Loss)}
	if n := float64(len(diffs)); n > 0 {
		s.SumSquares, s.MaxAbs, s.Sum = math.Sqrt(ss/n), math.Sqrt(ma/n), math.Sqrt(su/n)
	}
	return diffs, s, problems
}
