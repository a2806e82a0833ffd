package trainstep

import (
	"context"
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// queueMethodConfig is a small-CNN step of a queue method with a queue small enough that a
// few steps of 4 view pairs wrap it.
func queueMethodConfig(method string, mc MethodConfig) StepConfig {
	cfg := testStepConfig(SmallCNN)
	cfg.Method = method
	cfg.MethodConfig = mc
	return cfg
}

func floats(t *testing.T, s *Step, path string) []float32 {
	t.Helper()
	v := s.Store().GetVariable(path)
	if v == nil {
		t.Fatalf("no variable %s", path)
	}
	value, err := v.Value()
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](value)
}

// TestMoCoQueueAndMomentumEncoder checks one MoCo step's state changes against their
// definitions: the key encoder starts as a copy of the query encoder and moves to
// m·key + (1-m)·query (the query's value after the step); the queue takes this step's keys,
// unit vectors, as its newest rows and drops its oldest; and the loss of a step is computed
// before its keys enter the queue (it equals the loss the gradient graph, which never
// enqueues, computes on the same state).
func TestMoCoQueueAndMomentumEncoder(t *testing.T) {
	const n, k, d = 4, 10, 8
	for _, symmetric := range []bool{false, true} {
		t.Run(map[bool]string{false: "asymmetric", true: "symmetric"}[symmetric], func(t *testing.T) {
			cfg := queueMethodConfig(MoCoMethod, MethodConfig{SettingQueueSize: k, SettingMomentumEMA: 0.9, SettingBNSplits: 2, SettingSymmetric: map[bool]float64{false: 0, true: 1}[symmetric]})
			cfg.Model.ProjectionDim = d
			s, err := NewStep(newTestBackend(t), cfg, 8, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Finalize()
			const weights = "/model/backbone/layer1/conv/weights"
			const keyWeights = "/method/moco/key" + weights
			q0, k0 := floats(t, s, weights), floats(t, s, keyWeights)
			if !equalFloats(q0, k0) {
				t.Fatal("the key encoder does not start as a copy of the query encoder")
			}
			queue0 := floats(t, s, "/method/moco/queue")
			for i := range k {
				if norm := rowNorm(queue0[i*d : (i+1)*d]); math.Abs(norm-1) > 1e-5 {
					t.Fatalf("initial queue row %d has norm %v, want 1", i, norm)
				}
			}

			b := RandomBatch(5, n, 8, 8, 1)
			grad, err := s.Gradients(b)
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Run(b, 0.1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Loss != grad.Loss {
				t.Errorf("the step's loss %v differs from the gradient graph's %v on the same state: the step's keys entered the queue before its loss", res.Loss, grad.Loss)
			}
			if math.IsNaN(res.MeanQ) || res.MeanQ <= 0 || res.MeanQ >= 1 {
				t.Errorf("mean q = %v, want in (0, 1)", res.MeanQ)
			}

			q1, k1 := floats(t, s, weights), floats(t, s, keyWeights)
			for i := range k1 {
				want := 0.9*float64(k0[i]) + 0.1*float64(q1[i])
				if math.Abs(float64(k1[i])-want) > 1e-6*(1+math.Abs(want)) {
					t.Fatalf("key weight %d = %v after the step, want 0.9·%v + 0.1·%v = %v", i, k1[i], k0[i], q1[i], want)
				}
			}
			if equalFloats(q0, q1) {
				t.Error("the query encoder did not change")
			}

			enqueued := n
			if symmetric {
				enqueued = 2 * n
			}
			queue1 := floats(t, s, "/method/moco/queue")
			for i := range enqueued {
				if norm := rowNorm(queue1[i*d : (i+1)*d]); math.Abs(norm-1) > 1e-5 {
					t.Errorf("enqueued key %d has norm %v, want 1", i, norm)
				}
			}
			if !equalFloats(queue1[enqueued*d:], queue0[:(k-enqueued)*d]) {
				t.Errorf("after enqueuing %d keys the queue's older rows are not the first %d rows of the queue before", enqueued, k-enqueued)
			}
			// A second step pushes the first step's keys back by another batch of keys.
			if _, err := s.Run(RandomBatch(6, n, 8, 8, 1), 0.1); err != nil {
				t.Fatal(err)
			}
			queue2 := floats(t, s, "/method/moco/queue")
			if !equalFloats(queue2[enqueued*d:], queue1[:(k-enqueued)*d]) {
				t.Error("the second step did not push the first step's keys back")
			}
		})
	}
}

// TestNNCLRSupportSetAndPredictor: the support set takes each step's view-1 projections,
// normalised, first in first out; the prediction head is trained with the encoder.
func TestNNCLRSupportSetAndPredictor(t *testing.T) {
	const n, k, d = 4, 6, 8
	cfg := queueMethodConfig(NNCLRMethod, MethodConfig{SettingQueueSize: k, SettingPredictorHidden: 16})
	cfg.Model.ProjectionDim = d
	s, err := NewStep(newTestBackend(t), cfg, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	const head = "/method/nnclr/predictor/fc1/weights"
	head0, support0 := floats(t, s, head), floats(t, s, "/method/nnclr/support")
	b := RandomBatch(7, n, 8, 8, 1)
	grad, err := s.Gradients(b)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(b, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Loss != grad.Loss || math.IsNaN(res.Loss) {
		t.Errorf("step loss %v, gradient graph's %v: want equal and finite", res.Loss, grad.Loss)
	}
	support1 := floats(t, s, "/method/nnclr/support")
	for i := range n {
		if norm := rowNorm(support1[i*d : (i+1)*d]); math.Abs(norm-1) > 1e-5 {
			t.Errorf("support row %d has norm %v, want 1", i, norm)
		}
	}
	if !equalFloats(support1[n*d:], support0[:(k-n)*d]) {
		t.Error("the support set did not shift its older rows back by one batch")
	}
	if equalFloats(head0, floats(t, s, head)) {
		t.Error("the prediction head was not trained")
	}
}

// TestQueueMethodsResumeExactly: MoCo's queue and key encoder and NNCLR's support set and
// prediction head are in the checkpoint, so an interrupted and resumed run ends
// bit-identical to one that never stopped; resuming with other method settings is refused.
func TestQueueMethodsResumeExactly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method string
		mc     MethodConfig
		other  MethodConfig
	}{
		{"moco", MoCoMethod, MethodConfig{SettingQueueSize: 12, SettingMomentumEMA: 0.99, SettingBNSplits: 2}, MethodConfig{SettingQueueSize: 16}},
		{"moco-symmetric", MoCoMethod, MethodConfig{SettingQueueSize: 12, SettingMomentumEMA: 0.99, SettingBNSplits: 2, SettingSymmetric: 1}, MethodConfig{SettingQueueSize: 12, SettingMomentumEMA: 0.99, SettingBNSplits: 2, SettingSymmetric: 0}},
		{"nnclr", NNCLRMethod, MethodConfig{SettingQueueSize: 10, SettingPredictorHidden: 16}, MethodConfig{SettingQueueSize: 10, SettingPredictorHidden: 32}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := queueMethodConfig(tc.method, tc.mc)
			src := mustMemorySource(t, syntheticPairs(8, 12, 3, 8, 8, 1))
			ctx := context.Background()
			whole, out, run := stoppedRun(t, cfg, src)
			other := cfg
			other.MethodConfig = tc.other
			var setup *SetupError
			if err := CheckRun(ctx, other, run, src.Info(), out); !errors.As(err, &setup) || !strings.Contains(err.Error(), "settings") {
				t.Errorf("resuming with settings %+v: %v, want a setup error naming the settings", tc.other, err)
			}
			opts := quietOptions(t, src)
			opts.Resume = out
			resumed, err := Train(ctx, cfg, run, opts)
			if err != nil {
				t.Fatal(err)
			}
			wholeVars, resumedVars := variableBytes(t, whole.Checkpoint), variableBytes(t, resumed.Checkpoint)
			want := "/method/moco/queue"
			if tc.method == NNCLRMethod {
				want = "/method/nnclr/support"
			}
			if _, ok := wholeVars[want]; !ok {
				t.Fatalf("the checkpoint lacks %s: %v", want, keys(wholeVars))
			}
			sameBytes(t, wholeVars, resumedVars)
		})
	}
}

func TestMethodSettingsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  StepConfig
		want string
	}{
		{"simclr has no queue", queueMethodConfig(SimCLRMethod, MethodConfig{SettingQueueSize: 8}), "has no setting queue_size"},
		{"nnclr has no momentum", queueMethodConfig(NNCLRMethod, MethodConfig{SettingMomentumEMA: 0.9}), "has no setting momentum_ema"},
		{"moco momentum 1", queueMethodConfig(MoCoMethod, MethodConfig{SettingMomentumEMA: 1}), "must be in [0, 1)"},
		{"moco negative queue", queueMethodConfig(MoCoMethod, MethodConfig{SettingQueueSize: -1}), "queue-size -1: method moco: must be at least 1"},
		{"hypersphere has no queue form", func() StepConfig {
			c := queueMethodConfig(MoCoMethod, MethodConfig{})
			c.Loss = LossConfig{Kind: Hypersphere, Temperature: 0.1, Params: registry.Values{"align_alpha": 2, "uniform_t": 2}}
			return c
		}(), "has no queue form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	s, err := NewStep(newTestBackend(t), queueMethodConfig(MoCoMethod, MethodConfig{SettingQueueSize: 8}), 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	want := MethodConfig{SettingQueueSize: 8, SettingMomentumEMA: 0.999, SettingSymmetric: 0, SettingBNSplits: 8, SettingMomentumCosine: 0}
	if got := s.Config().MethodConfig; !maps.Equal(got, want) {
		t.Errorf("MoCo settings with defaults = %+v", got)
	}
}

func TestBNGroupsAndInterleave(t *testing.T) {
	for _, tc := range []struct{ n, want, got int }{
		{256, 8, 8}, {4, 8, 2}, {6, 8, 3}, {2, 8, 1}, {3, 8, 1}, {12, 8, 6}, {64, 1, 1},
	} {
		if got := bnGroups(tc.n, tc.want); got != tc.got {
			t.Errorf("bnGroups(%d, %d) = %d, want %d", tc.n, tc.want, got, tc.got)
		}
	}
}

func equalFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func rowNorm(row []float32) float64 {
	var s float64
	for _, x := range row {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// TestInterleaveAndSplitBatchNorm: the key regrouping and its inverse on indices, and split
// batch norm against its definition computed in loops.
func TestInterleaveAndSplitBatchNorm(t *testing.T) {
	backend := newTestBackend(t)
	exec, err := NewExec(backend, func(x *Node) []*Node {
		return []*Node{interleave(x, 2), deinterleave(interleave(x, 2), 2), interleave(x, 4)}
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Call([]int32{0, 1, 2, 3, 4, 5, 6, 7})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]int32{{0, 4, 1, 5, 2, 6, 3, 7}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 2, 4, 6, 1, 3, 5, 7}} {
		if got := tensors.MustCopyFlatData[int32](out[i]); !slices.Equal(got, want) {
			t.Errorf("output %d = %v, want %v", i, got, want)
		}
	}

	const b, c, splits = 6, 2, 3
	r := rand.New(rand.NewPCG(1, 1))
	x := make([]float64, b*c)
	x32 := make([]float32, b*c)
	for i := range x {
		x32[i] = float32(r.NormFloat64()*2 + 1)
		x[i] = float64(x32[i])
	}
	scale, offset := []float64{1.5, 0.5}, []float64{0.1, -0.2}
	bn, err := NewExec(backend, func(x, scale, offset *Node) []*Node {
		y, mean, variance := splitBatchNorm(x, scale, offset, splits)
		return []*Node{y, mean, variance}
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := bn.Call(tensors.FromFlatDataAndDimensions(x32, b, c), []float32{1.5, 0.5}, []float32{0.1, -0.2})
	if err != nil {
		t.Fatal(err)
	}
	got := func(i int) []float64 {
		var out []float64
		for _, v := range tensors.MustCopyFlatData[float32](res[i]) {
			out = append(out, float64(v))
		}
		return out
	}
	y := got(0)
	const per = b / splits
	for ch := range c {
		var meanOfMeans, meanOfVars float64
		for g := range splits {
			var m, v float64
			for i := g * per; i < (g+1)*per; i++ {
				m += x[i*c+ch]
			}
			m /= per
			for i := g * per; i < (g+1)*per; i++ {
				v += (x[i*c+ch] - m) * (x[i*c+ch] - m)
			}
			v /= per
			meanOfMeans += m / splits
			meanOfVars += v / splits
			for i := g * per; i < (g+1)*per; i++ {
				want := (x[i*c+ch]-m)/math.Sqrt(v+bnEpsilon)*scale[ch] + offset[ch]
				if !closeTo(y[i*c+ch], want, 1e-5) {
					t.Errorf("y[%d][%d] = %v, want %v", i, ch, y[i*c+ch], want)
				}
			}
		}
		if got := got(1)[ch]; !closeTo(got, meanOfMeans, 1e-5) {
			t.Errorf("mean of channel %d = %v, want %v", ch, got, meanOfMeans)
		}
		if got := got(2)[ch]; !closeTo(got, meanOfVars, 1e-5) {
			t.Errorf("variance of channel %d = %v, want %v", ch, got, meanOfVars)
		}
	}
}

// With momentum_ema_cosine the key encoder's momentum follows a cosine from momentum_ema at
// the first step to 1 at the last: a step's key weights are m_t·key + (1-m_t)·query with the
// m_t the trainer sets before it (SetProgress), and at the last step the key encoder no longer
// moves.
func TestMoCoCosineMomentum(t *testing.T) {
	if got := CosineMomentum(0.99, 0, 100); got != 0.99 {
		t.Errorf("at the first step: %v, want the base 0.99", got)
	}
	if got := CosineMomentum(0.99, 50, 100); math.Abs(got-0.995) > 1e-12 {
		t.Errorf("half way: %v, want 0.995", got)
	}
	if got := CosineMomentum(0.99, 100, 100); got != 1 {
		t.Errorf("at the end: %v, want 1", got)
	}
	cfg := queueMethodConfig(MoCoMethod, MethodConfig{SettingQueueSize: 8, SettingMomentumEMA: 0.9, SettingBNSplits: 2, SettingMomentumCosine: 1})
	cfg.Model.ProjectionDim = 8
	s, err := NewStep(newTestBackend(t), cfg, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	const weights = "/model/backbone/layer1/conv/weights"
	const keyWeights = "/method/moco/key" + weights
	for _, tc := range []struct{ step, total int }{{1, 4}, {4, 4}} {
		k0 := floats(t, s, keyWeights)
		if err := s.SetProgress(tc.step, tc.total); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(RandomBatch(uint64(tc.step), 4, 8, 8, 1), 0.1); err != nil {
			t.Fatal(err)
		}
		m := float64(float32(CosineMomentum(0.9, tc.step, tc.total)))
		q1, k1 := floats(t, s, weights), floats(t, s, keyWeights)
		for i := range k1 {
			want := m*float64(k0[i]) + (1-m)*float64(q1[i])
			if math.Abs(float64(k1[i])-want) > 1e-6*(1+math.Abs(want)) {
				t.Fatalf("step %d of %d: key weight %d = %v, want %v·%v + %v·%v = %v", tc.step, tc.total, i, k1[i], m, k0[i], 1-m, q1[i], want)
			}
		}
	}
}
