package trainstep

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// refLoss is the loss written directly from the paper's formulas with loops, in float64: the
// oracle the graph implementation is checked against. fixedW, when not nil, replaces DCLW's
// weights by constants (the detached-weight loss, for finite differences).
func refLoss(z1, z2 [][]float64, cfg LossConfig, fixedW []float64) (loss float64, perAnchor, q, w []float64) {
	n := len(z1)
	norm, dot := unit, dot64
	views := [2][][]float64{make([][]float64, n), make([][]float64, n)}
	for i := 0; i < n; i++ {
		views[0][i], views[1][i] = norm(z1[i]), norm(z2[i])
	}
	switch cfg.Kind {
	case DCLWExp:
		w = fixedW
		if w == nil {
			w = make([]float64, n)
			for i := range w {
				w[i] = cfg.Params.Float("delta") * math.Exp(-cfg.Params.Float("sigma")*dot(views[0][i], views[1][i]))
			}
		}
	case DCLW:
		w = fixedW
		if w == nil {
			var sum float64
			e := make([]float64, n)
			for i := range e {
				e[i] = math.Exp(dot(views[0][i], views[1][i]) / cfg.Params.Float("sigma"))
				sum += e[i]
			}
			w = make([]float64, n)
			for i := range w {
				w[i] = 2 - float64(n)*e[i]/sum
			}
		}
	}
	for k := 0; k < 2; k++ {
		for i := 0; i < n; i++ {
			s := dot(views[0][i], views[1][i]) / cfg.Temperature
			var u float64
			for l := 0; l < 2; l++ {
				for j := 0; j < n; j++ {
					if j != i {
						u += math.Exp(dot(views[k][i], views[l][j]) / cfg.Temperature)
					}
				}
			}
			var li float64
			switch cfg.Kind {
			case InfoNCE:
				li = -math.Log(math.Exp(s) / (math.Exp(s) + u))
			case DCL:
				li = -s + math.Log(u)
			case DCLW, DCLWExp:
				li = -w[i]*s + math.Log(u)
			case Hypersphere:
				li = math.Pow(sqDist(views[0][i], views[1][i]), cfg.Params.Float("align_alpha")/2) + refUniformity(views[k], cfg.Params.Float("uniform_t"))
			}
			perAnchor = append(perAnchor, li)
			q = append(q, 1-math.Exp(s)/(math.Exp(s)+u))
			loss += li
		}
	}
	if cfg.Reduction != Sum {
		loss /= float64(2 * n)
	}
	// Reorder to view-1 anchors then view-2 anchors (already in that order: k outer).
	return loss, perAnchor, q, w
}

func sqDist(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += (a[i] - b[i]) * (a[i] - b[i])
	}
	return s
}

// refUniformity is Wang & Isola's uniformity of unit vectors:
// log of the mean over pairs i ≠ j of exp(-t‖v_i − v_j‖²).
func refUniformity(v [][]float64, t float64) float64 {
	var sum float64
	for i := range v {
		for j := range v {
			if i != j {
				sum += math.Exp(-t * sqDist(v[i], v[j]))
			}
		}
	}
	return math.Log(sum / float64(len(v)*(len(v)-1)))
}

func randomEmbeddings(r *rand.Rand, n, d int, scale float64) [][]float64 {
	z := make([][]float64, n)
	for i := range z {
		z[i] = make([]float64, d)
		for j := range z[i] {
			z[i][j] = r.NormFloat64() * scale
		}
	}
	return z
}

// alignedEmbeddings gives view pairs that are close to each other, so positives are easy and
// DCL goes negative at low temperature.
func alignedEmbeddings(r *rand.Rand, n, d int) (z1, z2 [][]float64) {
	z1 = randomEmbeddings(r, n, d, 1)
	z2 = make([][]float64, n)
	for i := range z2 {
		z2[i] = make([]float64, d)
		for j := range z2[i] {
			z2[i][j] = z1[i][j] + 0.05*r.NormFloat64()
		}
	}
	return z1, z2
}

func closeTo(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*(1+math.Abs(want))
}

type lossCase struct {
	name    string
	n, d    int
	cfg     LossConfig
	aligned bool
}

func lossCases() []lossCase {
	var cases []lossCase
	for _, kind := range []LossKind{InfoNCE, DCL, DCLW, DCLWExp, Hypersphere} {
		for _, tc := range []struct {
			n, d    int
			tau     float64
			red     Reduction
			aligned bool
		}{
			{2, 1, 0.5, Mean, false},
			{2, 3, 0.07, Sum, false},
			{3, 5, 0.1, Mean, true},
			{8, 16, 0.07, Mean, true},
			{8, 16, 1.0, Sum, false},
			{13, 4, 0.2, Mean, false},
		} {
			cfg := LossConfig{Kind: kind, Temperature: tc.tau, Reduction: tc.red, Params: registry.Values{"sigma": 0.5, "delta": 3, "align_alpha": 2, "uniform_t": 2}}
			cases = append(cases, lossCase{
				name: fmt.Sprintf("%s/N%d/D%d/tau%g/%s/aligned=%v", kind, tc.n, tc.d, tc.tau, tc.red, tc.aligned),
				n:    tc.n, d: tc.d, cfg: cfg, aligned: tc.aligned,
			})
		}
	}
	return cases
}

func TestLossMatchesLoopReference(t *testing.T) {
	backend := newTestBackend(t)
	r := rand.New(rand.NewPCG(1, 2))
	sawNegativeDCL := false
	for _, tc := range lossCases() {
		t.Run(tc.name, func(t *testing.T) {
			var z1, z2 [][]float64
			if tc.aligned {
				z1, z2 = alignedEmbeddings(r, tc.n, tc.d)
			} else {
				z1, z2 = randomEmbeddings(r, tc.n, tc.d, 3), randomEmbeddings(r, tc.n, tc.d, 0.5)
			}
			got, err := LossAndGrad(backend, z1, z2, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			wantLoss, wantPer, wantQ, wantW := refLoss(z1, z2, tc.cfg, nil)
			if !closeTo(got.Loss, wantLoss, 1e-10) {
				t.Errorf("loss = %.12g, want %.12g", got.Loss, wantLoss)
			}
			for a := range wantPer {
				if !closeTo(got.PerAnchor[a], wantPer[a], 1e-10) {
					t.Errorf("anchor %d loss = %.12g, want %.12g", a, got.PerAnchor[a], wantPer[a])
				}
				if !closeTo(got.Q[a], wantQ[a], 1e-10) {
					t.Errorf("anchor %d q = %.12g, want %.12g", a, got.Q[a], wantQ[a])
				}
			}
			for i := range wantW {
				if !closeTo(got.Weights[i], wantW[i], 1e-10) {
					t.Errorf("w[%d] = %.12g, want %.12g", i, got.Weights[i], wantW[i])
				}
			}
			if tc.cfg.Kind == DCL && got.Loss < 0 {
				sawNegativeDCL = true
			}
		})
	}
	if !sawNegativeDCL {
		t.Errorf("no case made DCL negative: the cases do not cover easy positives")
	}
}

// TestLossGradientMatchesFiniteDifferences checks the backward pass against central
// differences of the loop reference, with respect to the raw (unnormalised) embeddings.
func TestLossGradientMatchesFiniteDifferences(t *testing.T) {
	backend := newTestBackend(t)
	r := rand.New(rand.NewPCG(3, 4))
	cases := lossCases()
	// The DCLW weight gradient, when let through, is checked too.
	cases = append(cases,
		lossCase{name: "dclw-weightgrad/N5/D4", n: 5, d: 4, cfg: LossConfig{Kind: DCLW, Temperature: 0.1, WeightGrad: true, Params: registry.Values{"sigma": 0.5}}},
		lossCase{name: "dclw-weightgrad/N8/D16/aligned", n: 8, d: 16, aligned: true, cfg: LossConfig{Kind: DCLW, Temperature: 0.07, WeightGrad: true, Reduction: Sum, Params: registry.Values{"sigma": 0.5}}},
		lossCase{name: "dclw-exp-weightgrad/N5/D4", n: 5, d: 4, cfg: LossConfig{Kind: DCLWExp, Temperature: 0.1, WeightGrad: true, Params: registry.Values{"sigma": 0.5, "delta": 3}}},
		lossCase{name: "hypersphere-alpha3-t1/N6/D5", n: 6, d: 5, cfg: LossConfig{Kind: Hypersphere, Temperature: 0.1, Params: registry.Values{"align_alpha": 3, "uniform_t": 1}}},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var z1, z2 [][]float64
			if tc.aligned {
				z1, z2 = alignedEmbeddings(r, tc.n, tc.d)
			} else {
				z1, z2 = randomEmbeddings(r, tc.n, tc.d, 1), randomEmbeddings(r, tc.n, tc.d, 2)
			}
			got, err := LossAndGrad(backend, z1, z2, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var fixedW []float64
			if (tc.cfg.Kind == DCLW || tc.cfg.Kind == DCLWExp) && !tc.cfg.WeightGrad {
				_, _, _, fixedW = refLoss(z1, z2, tc.cfg, nil) // detached: weights are constants
			}
			const h = 1e-6
			for view, z := range [][][]float64{z1, z2} {
				grad := got.Grad1
				if view == 1 {
					grad = got.Grad2
				}
				for i := range z {
					for j := range z[i] {
						orig := z[i][j]
						z[i][j] = orig + h
						up, _, _, _ := refLoss(z1, z2, tc.cfg, fixedW)
						z[i][j] = orig - h
						down, _, _, _ := refLoss(z1, z2, tc.cfg, fixedW)
						z[i][j] = orig
						num := (up - down) / (2 * h)
						if math.Abs(grad[i][j]-num) > 1e-6*(1+math.Abs(num)) {
							t.Errorf("d loss/d z%d[%d][%d] = %.10g, finite differences %.10g", view+1, i, j, grad[i][j], num)
						}
					}
				}
			}
		})
	}
}

func TestLossIdentities(t *testing.T) {
	backend := newTestBackend(t)
	r := rand.New(rand.NewPCG(5, 6))
	z1, z2 := randomEmbeddings(r, 6, 8, 1), randomEmbeddings(r, 6, 8, 1)
	eval := func(cfg LossConfig) *LossResult {
		t.Helper()
		res, err := LossAndGrad(backend, z1, z2, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	info := eval(LossConfig{Kind: InfoNCE, Temperature: 0.1})
	dcl := eval(LossConfig{Kind: DCL, Temperature: 0.1})
	for a := range info.PerAnchor {
		// InfoNCE_ik - DCL_ik = -log q_ik (DESIGN.md).
		if !closeTo(info.PerAnchor[a]-dcl.PerAnchor[a], -math.Log(info.Q[a]), 1e-10) {
			t.Errorf("anchor %d: InfoNCE - DCL = %g, -log q = %g", a, info.PerAnchor[a]-dcl.PerAnchor[a], -math.Log(info.Q[a]))
		}
		if info.Q[a] != dcl.Q[a] {
			t.Errorf("anchor %d: q depends on the loss kind: %g vs %g", a, info.Q[a], dcl.Q[a])
		}
	}
	// DCLW's weights have mean 1, and DCLW tends to DCL as σ grows (paper, Section 3).
	w := eval(LossConfig{Kind: DCLW, Temperature: 0.1, Params: registry.Values{"sigma": 0.5}})
	var mean float64
	for _, v := range w.Weights {
		mean += v
	}
	if mean /= float64(len(w.Weights)); !closeTo(mean, 1, 1e-12) {
		t.Errorf("mean DCLW weight = %g, want 1", mean)
	}
	wide := eval(LossConfig{Kind: DCLW, Temperature: 0.1, Params: registry.Values{"sigma": 1e9}})
	if !closeTo(wide.Loss, dcl.Loss, 1e-8) {
		t.Errorf("DCLW with σ=1e9 = %g, DCL = %g: want equal", wide.Loss, dcl.Loss)
	}
	sum := eval(LossConfig{Kind: DCL, Temperature: 0.1, Reduction: Sum})
	if !closeTo(sum.Loss, dcl.Loss*12, 1e-12) {
		t.Errorf("sum reduction = %g, want 2N × mean = %g", sum.Loss, dcl.Loss*12)
	}
}

// TestLossLowTemperatureIsFinite: at τ = 0.005 and 0.001 the logits reach ±1000, whose
// exponentials overflow even float64; the stabilised log-sum-exp must still give finite
// losses, multipliers and gradients. The positive's own logit once entered the exponential
// before being masked out: its exp was infinite and the backward pass multiplied it by zero
// (NaN gradients, and NaN training at small τ).
func TestLossLowTemperatureIsFinite(t *testing.T) {
	backend := newTestBackend(t)
	r := rand.New(rand.NewPCG(7, 8))
	// Orthogonal images, each view pair nearly equal: the positives' logits are about 1/τ and
	// the negatives' about 0.
	z1, z2 := make([][]float64, 4), make([][]float64, 4)
	for i := range z1 {
		z1[i], z2[i] = make([]float64, 4), make([]float64, 4)
		for j := range z1[i] {
			z1[i][j], z2[i][j] = 0.01*r.NormFloat64(), 0.01*r.NormFloat64()
		}
		z1[i][i], z2[i][i] = 1, 1
	}
	for _, kind := range []LossKind{InfoNCE, DCL, DCLW, DCLWExp} {
		for _, tau := range []float64{0.005, 0.001} {
			cfg := LossConfig{Kind: kind, Temperature: tau, Params: registry.Values{"sigma": 0.5, "delta": 3}}
			res, err := LossAndGrad(backend, z1, z2, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if want, _, _, _ := refLoss(z1, z2, cfg, nil); !math.IsInf(want, 0) && !math.IsNaN(want) && !closeTo(res.Loss, want, 1e-9) {
				t.Errorf("%s at τ=%g: loss %g, want %g", kind, tau, res.Loss, want)
			}
			values := append(append([]float64{res.Loss, res.MeanQ}, res.Q...), flatten(res.Grad1, 4)...)
			for i, v := range append(values, flatten(res.Grad2, 4)...) {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("%s at τ=%g: value %d of the loss, q and gradients is %g", kind, tau, i, v)
					break
				}
			}
		}
	}
}

func TestLossRejectsBadInput(t *testing.T) {
	backend := newTestBackend(t)
	good := [][]float64{{1, 0}, {0, 1}}
	for _, tc := range []struct {
		name   string
		z1, z2 [][]float64
		cfg    LossConfig
		want   string
	}{
		{"one pair", [][]float64{{1, 0}}, [][]float64{{0, 1}}, DefaultLossConfig(), "at least 2 view pairs"},
		{"row counts differ", good, [][]float64{{1, 0}}, DefaultLossConfig(), "z1 has 2 rows but z2 has 1"},
		{"ragged", good, [][]float64{{1, 0}, {1}}, DefaultLossConfig(), "z2 row 1 has 1 values, want 2"},
		{"zero row", good, [][]float64{{1, 0}, {0, 0}}, DefaultLossConfig(), "z2 row 1 is all zeros"},
		{"NaN", [][]float64{{1, math.NaN()}, {0, 1}}, good, DefaultLossConfig(), "z1[0][1] = NaN"},
		// Normalising a row whose squared length overflows would turn it into zeros.
		{"huge row", [][]float64{{1e200, 0}, {0, 1}}, good, DefaultLossConfig(), "z1 row 0: its squared length overflows (values up to 1e+200)"},
		{"tiny row", good, [][]float64{{1, 0}, {1e-200, 0}}, DefaultLossConfig(), "z2 row 1: its squared length underflows to 0"},
		{"zero temperature", good, good, LossConfig{Kind: DCL, Temperature: 0}, "temperature 0"},
		{"negative temperature", good, good, LossConfig{Kind: DCL, Temperature: -1}, "temperature -1"},
		{"DCLW zero sigma", good, good, LossConfig{Kind: DCLW, Temperature: 0.1, Params: registry.Values{ParamSigma: 0}}, "sigma 0"},
		{"unknown loss", good, good, LossConfig{Kind: "nce", Temperature: 0.1}, `unknown loss "nce"`},
		{"unknown reduction", good, good, LossConfig{Kind: DCL, Temperature: 0.1, Reduction: "max"}, `unknown reduction "max"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LossAndGrad(backend, tc.z1, tc.z2, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseLossKind(t *testing.T) {
	for _, tc := range []struct {
		give string
		want LossKind
	}{{"infonce", InfoNCE}, {"SimCLR", InfoNCE}, {"dcl", DCL}, {"DCLW", DCLW}} {
		got, err := ParseLossKind(tc.give)
		if err != nil || got != tc.want {
			t.Errorf("ParseLossKind(%q) = %q, %v; want %q", tc.give, got, err, tc.want)
		}
	}
	if _, err := ParseLossKind("triplet"); err == nil {
		t.Errorf("ParseLossKind(triplet) gave no error")
	}
}
