package trainstep

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

func unit(v []float64) []float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	s = math.Sqrt(s)
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x / s
	}
	return out
}

func dot64(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// refAnchorLoss is one anchor's loss from its positive logit s, its negatives' logits and,
// for DCLW and DCLWExp, its weight.
func refAnchorLoss(kind LossKind, s float64, negatives []float64, w float64) (loss, q float64) {
	var u float64
	for _, l := range negatives {
		u += math.Exp(l)
	}
	switch kind {
	case InfoNCE:
		loss = -s + math.Log(math.Exp(s)+u)
	case DCL:
		loss = -s + math.Log(u)
	case DCLW, DCLWExp:
		loss = -w*s + math.Log(u)
	}
	return loss, 1 - math.Exp(s)/(math.Exp(s)+u)
}

// refWeights are DCLW's (or DCLWExp's) weights of anchors whose positive cosines are cos.
func refWeights(cfg LossConfig, cos []float64) []float64 {
	w := make([]float64, len(cos))
	var sum float64
	for _, c := range cos {
		sum += math.Exp(c / cfg.Params.Float("sigma"))
	}
	for i, c := range cos {
		switch cfg.Kind {
		case DCLW:
			w[i] = 2 - float64(len(cos))*math.Exp(c/cfg.Params.Float("sigma"))/sum
		case DCLWExp:
			w[i] = cfg.Params.Float("delta") * math.Exp(-cfg.Params.Float("sigma")*c)
		}
	}
	return w
}

// refQueueLoss is the queue form written from the equations with loops: anchors are
// the rows of q, the positive of row i is k's row i, the negatives all rows of queue.
func refQueueLoss(q, k, queue [][]float64, cfg LossConfig, fixedW []float64) (loss float64, perAnchor, qs []float64) {
	cos := make([]float64, len(q))
	for i := range q {
		cos[i] = dot64(unit(q[i]), unit(k[i]))
	}
	w := fixedW
	if w == nil {
		w = refWeights(cfg, cos)
	}
	for i := range q {
		var negatives []float64
		for _, row := range queue {
			negatives = append(negatives, dot64(unit(q[i]), unit(row))/cfg.Temperature)
		}
		li, qi := refAnchorLoss(cfg.Kind, cos[i]/cfg.Temperature, negatives, w[i])
		perAnchor, qs = append(perAnchor, li), append(qs, qi)
		loss += li
	}
	if cfg.Reduction != Sum {
		loss /= float64(len(q))
	}
	return loss, perAnchor, qs
}

// refPairLoss is NNCLR's form with loops: the positive of anchor i is target i, the
// negatives the other targets.
func refPairLoss(a, tg [][]float64, cfg LossConfig, fixedW []float64) float64 {
	cos := make([]float64, len(a))
	for i := range a {
		cos[i] = dot64(unit(a[i]), unit(tg[i]))
	}
	w := fixedW
	if w == nil {
		w = refWeights(cfg, cos)
	}
	var loss float64
	for i := range a {
		var negatives []float64
		for j := range tg {
			if j != i {
				negatives = append(negatives, dot64(unit(a[i]), unit(tg[j]))/cfg.Temperature)
			}
		}
		li, _ := refAnchorLoss(cfg.Kind, cos[i]/cfg.Temperature, negatives, w[i])
		loss += li
	}
	if cfg.Reduction != Sum {
		loss /= float64(len(a))
	}
	return loss
}

// checkGradient compares grad with central differences of f with respect to each entry of
// each of zs.
func checkGradient(t *testing.T, f func() float64, zs [][][]float64, grads [][][]float64) {
	t.Helper()
	const h = 1e-6
	for v, z := range zs {
		for i := range z {
			for j := range z[i] {
				orig := z[i][j]
				z[i][j] = orig + h
				up := f()
				z[i][j] = orig - h
				down := f()
				z[i][j] = orig
				num := (up - down) / (2 * h)
				if got := grads[v][i][j]; math.Abs(got-num) > 1e-6*(1+math.Abs(num)) {
					t.Errorf("d loss/d input%d[%d][%d] = %.10g, finite differences %.10g", v+1, i, j, got, num)
				}
			}
		}
	}
}

var queueFormCases = []struct {
	n, k, d int
	tau     float64
	red     Reduction
}{{2, 1, 3, 0.5, Mean}, {4, 7, 5, 0.07, Mean}, {5, 16, 8, 0.2, Sum}, {8, 3, 4, 1, Mean}}

// TestQueueLossMatchesLoopReference: the queue form (MoCo's, and `dcl loss` with a queue)
// against loops over its equations, and its gradients with respect to queries and keys
// against finite differences.
func TestQueueLossMatchesLoopReference(t *testing.T) {
	backend := newTestBackend(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, kind := range []LossKind{InfoNCE, DCL, DCLW, DCLWExp} {
		for _, tc := range queueFormCases {
			cfg := LossConfig{Kind: kind, Temperature: tc.tau, Reduction: tc.red, Params: registry.Values{"sigma": 0.5, "delta": 3}}
			t.Run(fmt.Sprintf("%s/N%d/K%d/D%d/tau%g/%s", kind, tc.n, tc.k, tc.d, tc.tau, tc.red), func(t *testing.T) {
				q, k := alignedEmbeddings(r, tc.n, tc.d)
				queue := randomEmbeddings(r, tc.k, tc.d, 1)
				e, err := NewLossEvaluator(backend, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Finalize()
				got, err := e.EvalQueue(q, k, queue)
				if err != nil {
					t.Fatal(err)
				}
				want, wantPer, wantQ := refQueueLoss(q, k, queue, cfg, nil)
				if !closeTo(got.Loss, want, 1e-10) {
					t.Errorf("loss = %.12g, want %.12g", got.Loss, want)
				}
				if len(got.PerAnchor) != tc.n || len(got.Q) != tc.n {
					t.Fatalf("%d anchor losses and %d multipliers, want %d each", len(got.PerAnchor), len(got.Q), tc.n)
				}
				for i := range wantPer {
					if !closeTo(got.PerAnchor[i], wantPer[i], 1e-10) || !closeTo(got.Q[i], wantQ[i], 1e-10) {
						t.Errorf("anchor %d: loss %.12g q %.12g, want %.12g and %.12g", i, got.PerAnchor[i], got.Q[i], wantPer[i], wantQ[i])
					}
				}
				var fixedW []float64
				if kind == DCLW || kind == DCLWExp {
					cos := make([]float64, tc.n)
					for i := range cos {
						cos[i] = dot64(unit(q[i]), unit(k[i]))
					}
					fixedW = refWeights(cfg, cos) // the weights are constants in the backward pass
				}
				checkGradient(t, func() float64 { l, _, _ := refQueueLoss(q, k, queue, cfg, fixedW); return l },
					[][][]float64{q, k}, [][][]float64{got.Grad1, got.Grad2})
			})
		}
	}
}

// TestPairLossMatchesLoopReference: NNCLR's form against loops, values and gradients with
// respect to anchors and targets.
func TestPairLossMatchesLoopReference(t *testing.T) {
	backend := newTestBackend(t)
	r := rand.New(rand.NewPCG(13, 14))
	for _, kind := range []LossKind{InfoNCE, DCL, DCLW} {
		for _, tc := range queueFormCases {
			cfg := LossConfig{Kind: kind, Temperature: tc.tau, Reduction: tc.red, Params: registry.Values{"sigma": 0.5}}
			t.Run(fmt.Sprintf("%s/N%d/D%d/tau%g/%s", kind, tc.n, tc.d, tc.tau, tc.red), func(t *testing.T) {
				a, tg := alignedEmbeddings(r, tc.n, tc.d)
				exec, err := NewExec(backend, func(a, tg *Node) []*Node {
					nodes := PairLossGraph(a, tg, cfg)
					return append([]*Node{nodes.Loss}, Gradient(nodes.Loss, a, tg)...)
				})
				if err != nil {
					t.Fatal(err)
				}
				defer exec.Finalize()
				out, err := exec.Call(tensors.FromFlatDataAndDimensions(flatten(a, tc.d), tc.n, tc.d), tensors.FromFlatDataAndDimensions(flatten(tg, tc.d), tc.n, tc.d))
				if err != nil {
					t.Fatal(err)
				}
				if got, want := tensors.ToScalar[float64](out[0]), refPairLoss(a, tg, cfg, nil); !closeTo(got, want, 1e-10) {
					t.Errorf("loss = %.12g, want %.12g", got, want)
				}
				var fixedW []float64
				if kind == DCLW {
					cos := make([]float64, tc.n)
					for i := range cos {
						cos[i] = dot64(unit(a[i]), unit(tg[i]))
					}
					fixedW = refWeights(cfg, cos)
				}
				checkGradient(t, func() float64 { return refPairLoss(a, tg, cfg, fixedW) }, [][][]float64{a, tg},
					[][][]float64{unflatten(tensors.MustCopyFlatData[float64](out[1]), tc.d), unflatten(tensors.MustCopyFlatData[float64](out[2]), tc.d)})
			})
		}
	}
}

func TestQueueFormRejects(t *testing.T) {
	backend := newTestBackend(t)
	good := [][]float64{{1, 0}, {0, 1}}
	e, err := NewLossEvaluator(backend, LossConfig{Kind: DCL, Temperature: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	for _, tc := range []struct {
		name  string
		queue [][]float64
		want  string
	}{
		{"empty queue", [][]float64{}, "queue is empty"},
		{"ragged queue", [][]float64{{1, 0}, {1}}, "queue row 1 has 1 values, want 2"},
		{"zero queue row", [][]float64{{0, 0}}, "queue row 0 is all zeros"},
		{"NaN in queue", [][]float64{{math.NaN(), 1}}, "queue[0][0] = NaN"},
	} {
		if _, err := e.EvalQueue(good, good, tc.queue); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	h, err := NewLossEvaluator(backend, LossConfig{Kind: Hypersphere, Temperature: 0.1, Params: registry.Values{"align_alpha": 2, "uniform_t": 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Finalize()
	if _, err := h.EvalQueue(good, good, good); err == nil || !strings.Contains(err.Error(), "no queue form") {
		t.Errorf("hypersphere queue form: %v", err)
	}
}
