package analysis

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// refLinear is plain-loop multinomial logistic regression in float64 with the same initial
// weights, shuffles, schedule and optimiser as TrainLinear: the reference it must match.
func refLinear(train LabeledVectors, cfg LinearConfig) (w [][]float64, b []float64) {
	n, dim, nc := train.Vectors.Len(), train.Vectors.Dim, cfg.NumClasses
	x := make([][]float64, n)
	for i := range n {
		for _, v := range train.Vectors.Row(i) {
			x[i] = append(x[i], float64(v))
		}
	}
	if cfg.Standardize {
		for d := range dim {
			var mean, ss float64
			for i := range n {
				mean += x[i][d]
			}
			mean /= float64(n)
			for i := range n {
				ss += (x[i][d] - mean) * (x[i][d] - mean)
			}
			std := math.Sqrt(ss / float64(n))
			if std == 0 {
				std = 1
			}
			for i := range n {
				x[i][d] = (x[i][d] - mean) / std
			}
		}
	}
	init := rand.New(rand.NewPCG(cfg.Seed, 0x11ea7))
	w = make([][]float64, nc)
	vw := make([][]float64, nc)
	for c := range nc {
		w[c], vw[c] = make([]float64, dim), make([]float64, dim)
		for d := range dim {
			w[c][d] = float64(float32(init.NormFloat64() * cfg.InitStd))
		}
	}
	b, vb := make([]float64, nc), make([]float64, nc)
	for epoch := range cfg.Epochs {
		lr := cfg.LearningRate(epoch)
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		r := rand.New(rand.NewPCG(cfg.Seed, uint64(epoch)+1))
		r.Shuffle(n, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		for from := 0; from < n; from += cfg.BatchSize {
			batch := idx[from:min(n, from+cfg.BatchSize)]
			gw := make([][]float64, nc)
			for c := range gw {
				gw[c] = make([]float64, dim)
			}
			gb := make([]float64, nc)
			for _, i := range batch {
				logits := make([]float64, nc)
				for c := range nc {
					logits[c] = b[c]
					for d := range dim {
						logits[c] += w[c][d] * x[i][d]
					}
				}
				mx := slices.Max(logits)
				var z float64
				for _, l := range logits {
					z += math.Exp(l - mx)
				}
				for c := range nc {
					p := math.Exp(logits[c]-mx) / z
					if c == int(train.Labels[i]) {
						p--
					}
					p /= float64(len(batch))
					gb[c] += p
					for d := range dim {
						gw[c][d] += p * x[i][d]
					}
				}
			}
			var wn, gn float64
			for c := range nc {
				for d := range dim {
					gw[c][d] += cfg.WeightDecay * w[c][d]
					wn += w[c][d] * w[c][d]
					gn += gw[c][d] * gw[c][d]
				}
			}
			trust := 1.0
			if cfg.Optimizer == LARS && wn > 0 && gn > 0 {
				trust = cfg.TrustCoefficient * math.Sqrt(wn) / math.Sqrt(gn)
			}
			for c := range nc {
				for d := range dim {
					vw[c][d] = cfg.Momentum*vw[c][d] + trust*gw[c][d]
					w[c][d] -= lr * vw[c][d]
				}
				vb[c] = cfg.Momentum*vb[c] + gb[c]
				b[c] -= lr * vb[c]
			}
		}
	}
	return w, b
}

func TestTrainLinearMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	base := randomSet(r, "train.parquet", 230, 9, 4, false)
	tests := []struct {
		name string
		cfg  func(*LinearConfig)
	}{
		{"sgd step schedule, last batch short", func(c *LinearConfig) {}},
		{"sgd standardised, weight decay", func(c *LinearConfig) { c.Standardize, c.WeightDecay = true, 0.01 }},
		{"lars cosine", func(c *LinearConfig) {
			c.Optimizer, c.TrustCoefficient, c.Schedule, c.LR = LARS, 0.02, CosineSchedule, 2
		}},
		{"one full batch", func(c *LinearConfig) { c.BatchSize = 1000 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultLinearConfig()
			cfg.Epochs, cfg.BatchSize, cfg.LR, cfg.Milestones, cfg.NumClasses, cfg.Seed = 6, 64, 0.05, []int{2, 4}, 4, 9
			tt.cfg(&cfg)
			m, losses, err := TrainLinear(base, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.BatchSize > 230 {
				cfg.BatchSize = 230
			}
			wantW, wantB := refLinear(base, cfg)
			var maxDiff, maxW float64
			for c := range 4 {
				for d := range 9 {
					maxDiff = max(maxDiff, math.Abs(float64(m.W[c*9+d])-wantW[c][d]))
					maxW = max(maxW, math.Abs(wantW[c][d]))
				}
				maxDiff = max(maxDiff, math.Abs(float64(m.B[c])-wantB[c]))
			}
			if maxDiff > 1e-4*max(1, maxW) {
				t.Errorf("weights differ from the reference by up to %g (largest weight %g)", maxDiff, maxW)
			}
			if len(losses) != cfg.Epochs || !(losses[cfg.Epochs-1] < losses[0]) {
				t.Errorf("training losses %v do not fall", losses)
			}
		})
	}
}

func TestTrainLinearIsDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	train := randomSet(r, "train.parquet", 300, 16, 5, false)
	cfg := DefaultLinearConfig()
	cfg.Epochs, cfg.Seed = 5, 1
	a, _, err := TrainLinear(train, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := TrainLinear(train, cfg)
	if !reflect.DeepEqual(a, b) {
		t.Error("same seed, different models")
	}
	cfg.Seed = 2
	c, _, _ := TrainLinear(train, cfg)
	if slices.Equal(a.W, c.W) {
		t.Error("different seeds, same model")
	}
}

// TestLinearProbeLearns: with the protocol's defaults (lr 30 and all), clustered features are
// classified far above chance, and the probe's accuracy matches an independent count from
// its own scores.
func TestLinearProbeLearns(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	train := randomSet(r, "train.parquet", 1000, 16, 10, false)
	test := randomSet(rand.New(rand.NewPCG(25, 26)), "test.parquet", 400, 16, 10, false)
	for i := range train.Vectors.Data { // features on the scale of pooled ReLU activations
		train.Vectors.Data[i] *= 0.05
	}
	for i := range test.Vectors.Data {
		test.Vectors.Data[i] *= 0.05
	}
	cfg := DefaultLinearConfig()
	cfg.Epochs, cfg.Milestones = 10, []int{6, 8}
	res, model, err := LinearProbe(train, test, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Top1 < 80 || res.Top5 < res.Top1 || res.NumClasses != 10 || res.NTrain != 1000 || res.NTest != 400 {
		t.Errorf("probe result %+v", res)
	}
	scores, err := model.Scores(test.Vectors)
	if err != nil {
		t.Fatal(err)
	}
	hits := 0
	for i, y := range test.Labels {
		row := scores[i*10 : (i+1)*10]
		best := 0
		for c := range row {
			if row[c] > row[best] {
				best = c
			}
		}
		if best == int(y) {
			hits++
		}
	}
	if got := 100 * float64(hits) / 400; got != res.Top1 {
		t.Errorf("top-1 %.2f, counted from the scores %.2f", res.Top1, got)
	}
}

func TestLearningRateSchedules(t *testing.T) {
	step := DefaultLinearConfig()
	for _, tt := range []struct {
		epoch int
		want  float64
	}{{0, 30}, {59, 30}, {60, 3}, {79, 3}, {80, 0.3}, {99, 0.3}} {
		if got := step.LearningRate(tt.epoch); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("step: epoch %d lr %v, want %v", tt.epoch, got, tt.want)
		}
	}
	cos := LARSLinearConfig()
	for _, tt := range []struct {
		epoch int
		want  float64
	}{{0, 1.2}, {45, 0.6}, {90, 0}} {
		if got := cos.LearningRate(tt.epoch); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("cosine: epoch %d lr %v, want %v", tt.epoch, got, tt.want)
		}
	}
}

func TestLinearProbeErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	train := randomSet(r, "emb/train.parquet", 50, 4, 3, false)
	test := randomSet(r, "emb/test.parquet", 20, 4, 3, false)
	bad := test
	bad.Labels = slices.Clone(test.Labels)
	bad.Labels[4] = 3
	otherDim := randomSet(r, "emb/test.parquet", 20, 6, 3, false)
	tests := []struct {
		name        string
		train, test LabeledVectors
		cfg         func(*LinearConfig)
		want        string
	}{
		{"label outside known classes", train, bad, func(c *LinearConfig) { c.NumClasses = 3 }, "emb/test.parquet: row 4: label 3 outside [0, 3)"},
		{"dimensions differ", train, otherDim, func(*LinearConfig) {}, "emb/train.parquet has 4-dimensional vectors, emb/test.parquet 6-dimensional"},
		{"no epochs", train, test, func(c *LinearConfig) { c.Epochs = 0 }, "epochs = 0"},
		{"bad optimizer", train, test, func(c *LinearConfig) { c.Optimizer = "adam" }, `optimizer "adam"`},
		{"lars without trust", train, test, func(c *LinearConfig) { c.Optimizer = LARS }, "trust coefficient"},
		{"empty training set", LabeledVectors{Source: "empty.parquet", Vectors: Vectors{Dim: 4}}, test, func(c *LinearConfig) { c.NumClasses = 3 }, "empty.parquet: no training vectors"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultLinearConfig()
			cfg.Epochs = 1
			tt.cfg(&cfg)
			_, _, err := LinearProbe(tt.train, tt.test, cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestLinearWithEpochsScalesMilestones(t *testing.T) {
	tests := []struct {
		epochs int
		want   []int
	}{{100, []int{60, 80}}, {30, []int{18, 24}}, {200, []int{120, 160}}, {1, []int{1, 1}}}
	for _, tt := range tests {
		got := DefaultLinearConfig().WithEpochs(tt.epochs)
		if got.Epochs != tt.epochs || !slices.Equal(got.Milestones, tt.want) {
			t.Errorf("WithEpochs(%d) = %d epochs, milestones %v; want %v", tt.epochs, got.Epochs, got.Milestones, tt.want)
		}
	}
	if lars := LARSLinearConfig().WithEpochs(30); lars.Epochs != 30 || len(lars.Milestones) != 0 {
		t.Errorf("LARS WithEpochs(30) = %+v", lars)
	}
}

// A probe whose loss climbs far above its first epoch's before it falls (the protocol's lr 30
// on features that are not standardised) says so, with where it peaked; a loss that falls, or
// one that is still climbing at the end, gets no such note.
func TestLinearLossNote(t *testing.T) {
	cfg := DefaultLinearConfig()
	note := lossNote([]float64{2.3, 40, 1500, 90, 0.6}, cfg)
	for _, want := range []string{"rose from 2.3 (epoch 1) to 1500 (epoch 3) before it fell to 0.6 (epoch 5)", "lr 30", "standardize: true"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
	for _, losses := range [][]float64{{2.3, 1.5, 0.9}, {2.3, 3, 2}, {2.3, 40, 1500}} {
		if note := lossNote(losses, cfg); note != "" {
			t.Errorf("losses %v: note %q, want none", losses, note)
		}
	}
}

// TestLinearProbeCropsTrainsEpochOnPass: epoch e trains on crop pass e mod P, so a probe of
// two epochs over passes A and B is one epoch on A continued by one on B; with as many epochs
// as the first pass covers it is the fixed-feature probe on that pass.
func TestLinearProbeCropsTrainsEpochOnPass(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	a := randomSet(r, "crops.parquet", 200, 8, 4, false)
	b := randomSet(r, "crops.parquet", 200, 8, 4, false)
	copy(b.Labels, a.Labels)
	test := randomSet(r, "test.parquet", 100, 8, 4, false)
	cfg := DefaultLinearConfig()
	cfg.Epochs, cfg.LR, cfg.Seed, cfg.NumClasses = 1, 0.5, 3, 4
	oneOnA, _, err := LinearProbeCrops([]LabeledVectors{a, b}, test, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	fixedA, _, _ := LinearProbe(a, test, cfg)
	if oneOnA.TrainLoss[0] != fixedA.TrainLoss[0] || oneOnA.Top1 != fixedA.Top1 {
		t.Errorf("epoch 1 of crops [A, B] is not an epoch on A: loss %v, fixed %v", oneOnA.TrainLoss, fixedA.TrainLoss)
	}
	if oneOnA.CropPasses != 2 || fixedA.CropPasses != 0 {
		t.Errorf("crop passes %d and %d, want 2 and 0 (fixed)", oneOnA.CropPasses, fixedA.CropPasses)
	}
	cfg.Epochs = 2
	twoCrops, _, _ := LinearProbeCrops([]LabeledVectors{a, b}, test, cfg, nil)
	twoOnA, _, _ := LinearProbe(a, test, cfg)
	if twoCrops.TrainLoss[1] == twoOnA.TrainLoss[1] {
		t.Errorf("epoch 2 of crops [A, B] trained on A again (loss %v)", twoCrops.TrainLoss)
	}
	short := b
	short.Vectors.Data, short.Labels = b.Vectors.Data[:8*10], b.Labels[:10]
	if _, _, err := LinearProbeCrops([]LabeledVectors{a, short}, test, cfg, nil); err == nil || !strings.Contains(err.Error(), "crop pass 1 has 10 vectors") {
		t.Errorf("passes of different sizes: %v", err)
	}
}
