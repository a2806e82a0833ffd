package trainstep

import (
	"math"
	"testing"

	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// refOptimizer is the update rule written out with loops, in float64.
type refOptimizer struct {
	cfg OptimizerConfig
	buf map[string][]float64
}

func (r *refOptimizer) update(name string, w, g []float64, lr float64, decayed bool) {
	if r.buf == nil {
		r.buf = map[string][]float64{}
	}
	if r.buf[name] == nil {
		r.buf[name] = make([]float64, len(w))
	}
	decay := r.cfg.WeightDecay
	adapt := r.cfg.Kind == LARS
	if !decayed {
		decay, adapt = 0, false
	}
	step := make([]float64, len(w))
	var wn, gn float64
	for i := range w {
		step[i] = g[i] + decay*w[i]
		wn += w[i] * w[i]
		gn += g[i] * g[i]
	}
	trust := 1.0
	if adapt && wn > 0 && gn > 0 {
		trust = 0.001 * math.Sqrt(wn) / (math.Sqrt(gn) + decay*math.Sqrt(wn))
	}
	for i := range w {
		r.buf[name][i] = r.cfg.Momentum*r.buf[name][i] + step[i]*trust
		w[i] -= lr * r.buf[name][i]
	}
}

// TestOptimizerMatchesReference runs a few steps of loss = Σ c·(w - t)² over a decayed
// "weights" variable and an undecayed "bias" and compares with the loop reference.
func TestOptimizerMatchesReference(t *testing.T) {
	backend := newTestBackend(t)
	for _, cfg := range []OptimizerConfig{
		{Kind: SGDMomentum, Momentum: 0.9, WeightDecay: 5e-4},
		{Kind: SGDMomentum, Momentum: 0, WeightDecay: 0},
		{Kind: SGDMomentum, Momentum: 0.9, WeightDecay: 0.1, DecayAll: true},
		{Kind: LARS, Momentum: 0.9, WeightDecay: 1e-6},
	} {
		t.Run(string(cfg.Kind), func(t *testing.T) {
			opt, err := NewOptimizer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			store := model.NewStore()
			initW := []float32{0.5, -1, 2}
			initB := []float32{0.25, -0.75}
			target := []float32{1, 1, 1}
			store.Scope("/m").VariableWithValue(weightsName, initW)
			store.Scope("/m").VariableWithValue(biasName, initB)
			exec, err := model.NewExec(backend, store, func(scope *model.Scope, g *Graph) *Node {
				w := store.GetVariable("/m/" + weightsName).NodeValue(g)
				b := store.GetVariable("/m/" + biasName).NodeValue(g)
				loss := Add(ReduceAllSum(Square(Sub(w, Const(g, target)))), MulScalar(ReduceAllSum(Square(b)), 3))
				opt.UpdateGraph(scope, g, loss)
				return loss
			})
			if err != nil {
				t.Fatal(err)
			}
			ref := &refOptimizer{cfg: cfg}
			w := []float64{0.5, -1, 2}
			b := []float64{0.25, -0.75}
			for step := 0; step < 4; step++ {
				lr := 0.1 * float64(step+1)
				if err := SetLearningRate(store, lr); err != nil {
					t.Fatal(err)
				}
				if _, err := exec.Call(); err != nil {
					t.Fatal(err)
				}
				gw := make([]float64, 3)
				for i := range w {
					gw[i] = 2 * (w[i] - float64(target[i]))
				}
				gb := []float64{6 * b[0], 6 * b[1]}
				ref.update("w", w, gw, lr, true)
				ref.update("b", b, gb, lr, cfg.DecayAll)
			}
			gotW := tensors.MustCopyFlatData[float32](store.GetVariable("/m/" + weightsName).MustValue())
			gotB := tensors.MustCopyFlatData[float32](store.GetVariable("/m/" + biasName).MustValue())
			for i := range w {
				if math.Abs(float64(gotW[i])-w[i]) > 1e-5 {
					t.Errorf("weights[%d] = %v, want %v", i, gotW[i], w[i])
				}
			}
			for i := range b {
				if math.Abs(float64(gotB[i])-b[i]) > 1e-5 {
					t.Errorf("bias[%d] = %v, want %v", i, gotB[i], b[i])
				}
			}
		})
	}
}

func TestOptimizerRejectsBadSettings(t *testing.T) {
	for _, cfg := range []OptimizerConfig{
		{Kind: "adam", Momentum: 0.9},
		{Kind: SGDMomentum, Momentum: 1},
		{Kind: SGDMomentum, Momentum: -0.1},
		{Kind: SGDMomentum, Momentum: 0.9, WeightDecay: -1},
	} {
		if _, err := NewOptimizer(cfg); err == nil {
			t.Errorf("NewOptimizer(%+v) gave no error", cfg)
		}
	}
}

func TestSchedule(t *testing.T) {
	s, err := NewSchedule(0.03, 512, 10, 110)
	if err != nil {
		t.Fatal(err)
	}
	peak := 0.03 * 512 / 256
	for _, tc := range []struct {
		step int
		want float64
	}{
		{0, peak / 10},
		{4, peak * 5 / 10},
		{9, peak},
		{10, peak},
		{60, peak / 2},
		{110, 0},
		{200, 0},
	} {
		if got := s.At(tc.step); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("At(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	for _, bad := range []struct {
		base          float64
		warmup, total int
	}{{0, 0, 10}, {-1, 0, 10}, {0.03, 0, 0}, {0.03, 11, 10}, {math.Inf(1), 0, 10}} {
		if _, err := NewSchedule(bad.base, 256, bad.warmup, bad.total); err == nil {
			t.Errorf("NewSchedule(%v, 256, %d, %d) gave no error", bad.base, bad.warmup, bad.total)
		}
	}
}
