package analysis

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// Optimizer names the linear probe's optimiser.
type Optimizer string

const (
	// SGD is PyTorch's SGD with momentum (v = μv + g + wd·p; p -= lr·v), OpenSelfSup's choice.
	SGD Optimizer = "sgd"
	// LARS is SGD whose weight-matrix update is scaled by the trust ratio
	// η·‖W‖/‖∇W + wd·W‖ (the LARS of SimSiam's and MoCo v3's linear evaluation); biases take
	// plain momentum steps.
	LARS Optimizer = "lars"
)

// Schedule names the learning-rate schedule.
type Schedule string

const (
	// StepSchedule multiplies the rate by Gamma at each milestone epoch.
	StepSchedule Schedule = "step"
	// CosineSchedule decays the rate per epoch as lr·(1+cos(π·epoch/epochs))/2.
	CosineSchedule Schedule = "cosine"
)

// LinearConfig configures the linear probe: multinomial logistic regression on frozen
// features, trained with mini-batch SGD or LARS. The zero value of a field is not a default;
// start from DefaultLinearConfig or LARSLinearConfig.
type LinearConfig struct {
	Epochs      int
	BatchSize   int // the last, smaller batch of an epoch is kept (PyTorch's drop_last=False)
	LR          float64
	Momentum    float64
	WeightDecay float64 // applied to the weights, not the bias
	Schedule    Schedule
	Milestones  []int   // step schedule: epochs at which the rate is multiplied by Gamma
	Gamma       float64 // step schedule factor
	Optimizer   Optimizer
	// TrustCoefficient is LARS's η.
	TrustCoefficient float64
	// Standardize scales each feature dimension to zero mean and unit variance with the
	// training set's statistics before training (and the same for test features). The
	// OpenSelfSup protocol does not: its head is one fully connected layer on the frozen
	// features. It is equivalent to a batch-norm layer without affine parameters in front of
	// the head, evaluated with population statistics.
	Standardize bool
	// InitStd is the standard deviation of the normal initial weights (bias starts at 0);
	// OpenSelfSup's ClsHead uses 0.01.
	InitStd float64
	// Seed drives the initial weights and each epoch's shuffle: the same seed and data give
	// the same model bit for bit (on one machine with the same GOMAXPROCS, which decides how
	// the matrix multiply splits its work).
	Seed uint64
	// NumClasses is the dataset's class count; 0 means one more than the largest label.
	NumClasses int
}

// DefaultLinearConfig is the OpenSelfSup linear-classification benchmark the paper follows
// (configs/benchmarks/linear_classification/imagenet/r50_last.py, with ClsHead's
// init_weights): SGD lr 30, momentum 0.9, weight decay 0, 100 epochs, lr ×0.1 at epochs 60
// and 80, batch 256, weights initialised N(0, 0.01²), features not standardised.
func DefaultLinearConfig() LinearConfig {
	return LinearConfig{
		Epochs: 100, BatchSize: 256, LR: 30, Momentum: 0.9, WeightDecay: 0,
		Schedule: StepSchedule, Milestones: []int{60, 80}, Gamma: 0.1,
		Optimizer: SGD, InitStd: 0.01,
	}
}

// LARSLinearConfig is the paper's second protocol (SimSiam's linear evaluation): LARS with
// trust coefficient 0.001, lr 1.2, momentum 0.9, weight decay 0, batch 4096, 90 epochs,
// cosine decay.
func LARSLinearConfig() LinearConfig {
	return LinearConfig{
		Epochs: 90, BatchSize: 4096, LR: 1.2, Momentum: 0.9, WeightDecay: 0,
		Schedule: CosineSchedule, Optimizer: LARS, TrustCoefficient: 0.001, InitStd: 0.01,
	}
}

// MonitorLinearConfig is the linear probe the trainer's monitor fits to its sample's
// features each time it runs (trainstep.KNNMonitorOptions.Linear): a trend of the linear
// accuracy during training, fast enough to run every few epochs. Features are standardised,
// so one small rate suits every encoder: SGD lr 0.1, momentum 0.9, 20 epochs of batch 256,
// cosine decay. It is not the evaluation's protocol, whose figure it does not predict.
func MonitorLinearConfig() LinearConfig {
	return LinearConfig{
		Epochs: 20, BatchSize: 256, LR: 0.1, Momentum: 0.9, Schedule: CosineSchedule,
		Optimizer: SGD, Standardize: true, InitStd: 0.01, Seed: 1,
	}
}

// WithEpochs returns the protocol run for a different number of epochs, its step schedule's
// decays kept at the same fractions of the run (60 and 80 of 100 epochs become 18 and 24 of
// 30): the one place where a shorter or longer probe rescales its milestones.
func (c LinearConfig) WithEpochs(epochs int) LinearConfig {
	if epochs == c.Epochs || c.Epochs < 1 || epochs < 1 {
		c.Epochs = epochs
		return c
	}
	ms := make([]int, len(c.Milestones))
	for i, m := range c.Milestones {
		ms[i] = max(1, m*epochs/c.Epochs)
	}
	c.Epochs, c.Milestones = epochs, ms
	return c
}

// ParseOptimizer reads an optimiser as the --optimizer flag spells it.
func ParseOptimizer(s string) (Optimizer, error) {
	switch o := Optimizer(strings.ToLower(s)); o {
	case SGD, LARS:
		return o, nil
	}
	return "", fmt.Errorf("optimizer %q: want sgd or lars", s)
}

// Validate reports a protocol that cannot be run.
func (c LinearConfig) Validate() error {
	switch {
	case c.Epochs < 1:
		return fmt.Errorf("epochs = %d: want at least 1", c.Epochs)
	case c.BatchSize < 1:
		return fmt.Errorf("batch size %d: want at least 1", c.BatchSize)
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("learning rate %v: want a positive number", c.LR)
	case c.Momentum < 0 || c.Momentum >= 1:
		return fmt.Errorf("momentum %v: want a number in [0, 1)", c.Momentum)
	case c.WeightDecay < 0:
		return fmt.Errorf("weight decay %v: want 0 or more", c.WeightDecay)
	case c.InitStd < 0:
		return fmt.Errorf("initial weight std %v: want 0 or more", c.InitStd)
	}
	switch c.Schedule {
	case StepSchedule, CosineSchedule:
	default:
		return fmt.Errorf("schedule %q: want step or cosine", c.Schedule)
	}
	switch c.Optimizer {
	case SGD:
	case LARS:
		if !(c.TrustCoefficient > 0) {
			return fmt.Errorf("LARS trust coefficient %v: want a positive number", c.TrustCoefficient)
		}
	default:
		return fmt.Errorf("optimizer %q: want sgd or lars", c.Optimizer)
	}
	return nil
}

// LearningRate returns the rate used during epoch (0-based).
func (c LinearConfig) LearningRate(epoch int) float64 {
	if c.Schedule == CosineSchedule {
		return c.LR * 0.5 * (1 + math.Cos(math.Pi*float64(epoch)/float64(c.Epochs)))
	}
	lr := c.LR
	for _, m := range c.Milestones {
		if epoch >= m {
			lr *= c.Gamma
		}
	}
	return lr
}

// LinearModel is a trained linear classifier: scores = W·standardise(x) + B.
type LinearModel struct {
	NumClasses int       `json:"num_classes"`
	Dim        int       `json:"dim"`
	W          []float32 `json:"w"` // NumClasses × Dim, row-major
	B          []float32 `json:"b"`
	// Mean and Std standardise features before W (nil when the model was trained without).
	Mean []float32 `json:"mean,omitempty"`
	Std  []float32 `json:"std,omitempty"`
}

// LinearResult is the outcome of a linear probe, as `dcl linear` prints it.
type LinearResult struct {
	Top1       float64   `json:"top1"`
	Top5       float64   `json:"top5"`
	NTrain     int       `json:"n_train"`
	NTest      int       `json:"n_test"`
	NumClasses int       `json:"num_classes"`
	Optimizer  Optimizer `json:"optimizer"`
	Epochs     int       `json:"epochs"`
	BatchSize  int       `json:"batch_size"`
	LR         float64   `json:"lr"`
	// Milestones are the epochs at which the step schedule decayed the rate (none for cosine).
	Milestones []int  `json:"milestones,omitempty"`
	Seed       uint64 `json:"seed"`
	// TrainLoss is the mean cross-entropy over each epoch's batches.
	TrainLoss []float64 `json:"train_loss"`
	// Note explains a TrainLoss that rose far above its first epoch's before it fell
	// (lossNote); "" where it did not.
	Note     string          `json:"note,omitempty"`
	PerClass []ClassAccuracy `json:"per_class,omitempty"`
	// CropPasses is the number of passes of augmented crops the classifier trained on
	// (LinearProbeCrops); 0: fixed features, each training image embedded once.
	CropPasses int `json:"crop_passes,omitempty"`
}

func cropPasses(crops []LabeledVectors) int {
	if len(crops) == 1 {
		return 0
	}
	return len(crops)
}

func stepMilestones(c LinearConfig) []int {
	if c.Schedule != StepSchedule {
		return nil
	}
	return c.Milestones
}

// LinearProbe trains a linear classifier on train's frozen features and reports its top-1
// and top-5 accuracy on test.
func LinearProbe(train, test LabeledVectors, cfg LinearConfig) (*LinearResult, *LinearModel, error) {
	return LinearProbeEach(train, test, cfg, nil)
}

// LinearProbeEach is LinearProbe calling epochDone (if not nil) after each training epoch,
// for a caller that shows progress.
func LinearProbeEach(train, test LabeledVectors, cfg LinearConfig, epochDone func()) (*LinearResult, *LinearModel, error) {
	return LinearProbeCrops([]LabeledVectors{train}, test, cfg, epochDone)
}

// LinearProbeCrops is the linear probe trained on augmented crops, OpenSelfSup's protocol:
// crops[p] are the features of pass p of the training images' random crops, and epoch e
// trains on crops[e mod len(crops)], so that with as many passes as epochs every epoch sees
// fresh crops. One crop set is LinearProbeEach's fixed features.
func LinearProbeCrops(crops []LabeledVectors, test LabeledVectors, cfg LinearConfig, epochDone func()) (*LinearResult, *LinearModel, error) {
	if len(crops) == 0 {
		return nil, nil, fmt.Errorf("%s: no training crops", test.Source)
	}
	train := crops[0]
	if cfg.NumClasses == 0 {
		n, err := NumClassesOf(train, test)
		if err != nil {
			return nil, nil, fmt.Errorf("%s, %s: %w", train.Source, test.Source, err)
		}
		cfg.NumClasses = n
	}
	if err := test.Validate(cfg.NumClasses); err != nil {
		return nil, nil, err
	}
	if test.Vectors.Len() > 0 && test.Vectors.Dim != train.Vectors.Dim {
		return nil, nil, fmt.Errorf("%s has %d-dimensional vectors, %s %d-dimensional", train.Source, train.Vectors.Dim, test.Source, test.Vectors.Dim)
	}
	model, losses, err := trainLinear(crops, cfg, epochDone)
	if err != nil {
		return nil, nil, err
	}
	acc, err := model.Evaluate(test)
	if err != nil {
		return nil, nil, err
	}
	NameClasses(acc.PerClass, train.Classes)
	return &LinearResult{
		Top1: acc.Top1, Top5: acc.Top5, NTrain: train.Vectors.Len(), NTest: test.Vectors.Len(),
		NumClasses: cfg.NumClasses, Optimizer: cfg.Optimizer, Epochs: cfg.Epochs, BatchSize: cfg.BatchSize,
		LR: cfg.LR, Milestones: stepMilestones(cfg), Seed: cfg.Seed, TrainLoss: losses, Note: lossNote(losses, cfg), PerClass: acc.PerClass,
		CropPasses: cropPasses(crops),
	}, model, nil
}

// LinearLossClimb is how many times its first epoch's the probe's loss must rise to for
// lossNote.
const LinearLossClimb = 3

// lossNote explains a training loss that rose to more than LinearLossClimb times its first
// epoch's before it fell: with the protocol's large rate (SGD lr 30) on features that are not
// standardised, the first epochs overshoot before the classifier settles. The classifier is the last epoch's, so the accuracy is not affected by the climb,
// but a reader of the loss curve should not take it for a divergence.
func lossNote(losses []float64, cfg LinearConfig) string {
	if len(losses) < 2 || !(losses[0] > 0) {
		return ""
	}
	peak := 0
	for i, l := range losses {
		if l > losses[peak] {
			peak = i
		}
	}
	last := losses[len(losses)-1]
	if losses[peak] < LinearLossClimb*losses[0] || peak == len(losses)-1 || !(last < losses[peak]) {
		return ""
	}
	note := fmt.Sprintf("the probe's training loss rose from %.3g (epoch 1) to %.4g (epoch %d) before it fell to %.3g (epoch %d): "+
		"lr %g overshoots at first on features of this scale before the classifier settles; the accuracy is "+
		"the last epoch's classifier's", losses[0], losses[peak], peak+1, last, len(losses), cfg.LR)
	if !cfg.Standardize {
		note += " (standardize: true scales the features first and keeps the loss small)"
	}
	return note
}

// TrainLinear fits a linear classifier to train and returns it with the mean training loss
// of each epoch. Each epoch visits the examples in a permutation drawn from (Seed, epoch).
func TrainLinear(train LabeledVectors, cfg LinearConfig) (*LinearModel, []float64, error) {
	return trainLinear([]LabeledVectors{train}, cfg, nil)
}

// trainLinear trains on crops[e mod len(crops)] in epoch e; standardisation takes the first
// pass's statistics.
func trainLinear(crops []LabeledVectors, cfg LinearConfig, epochDone func()) (*LinearModel, []float64, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	train := crops[0]
	if cfg.NumClasses == 0 {
		n, err := NumClassesOf(crops...)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", train.Source, err)
		}
		cfg.NumClasses = n
	}
	n, dim, nc := train.Vectors.Len(), train.Vectors.Dim, cfg.NumClasses
	for p, c := range crops {
		if err := c.Validate(cfg.NumClasses); err != nil {
			return nil, nil, err
		}
		if c.Vectors.Len() != n || c.Vectors.Dim != dim {
			return nil, nil, fmt.Errorf("%s: crop pass %d has %d vectors of %d values, pass 0 %d of %d", c.Source, p, c.Vectors.Len(), c.Vectors.Dim, n, dim)
		}
	}
	if n == 0 {
		return nil, nil, fmt.Errorf("%s: no training vectors", train.Source)
	}
	m := &LinearModel{NumClasses: nc, Dim: dim, W: make([]float32, nc*dim), B: make([]float32, nc)}
	if cfg.Standardize {
		m.Mean, m.Std = featureStats(train.Vectors)
	}
	init := rand.New(rand.NewPCG(cfg.Seed, 0x11ea7))
	for i := range m.W {
		m.W[i] = float32(init.NormFloat64() * cfg.InitStd)
	}

	bs := min(cfg.BatchSize, n)
	var (
		xb      = make([]float32, bs*dim)
		logits  = make([]float32, bs*nc)
		gradW   = make([]float32, nc*dim)
		gradB   = make([]float32, nc)
		velW    = make([]float32, nc*dim)
		velB    = make([]float32, nc)
		yb      = make([]int32, bs)
		losses  = make([]float64, cfg.Epochs)
		indices = make([]int, n)
	)
	var x Vectors
	for epoch := range cfg.Epochs {
		train := crops[epoch%len(crops)]
		if epoch < len(crops) || len(crops) > 1 {
			x = m.standardize(train.Vectors) // fixed features: once
		}
		lr := float32(cfg.LearningRate(epoch))
		shuffle := rand.New(rand.NewPCG(cfg.Seed, uint64(epoch)+1))
		for i := range indices {
			indices[i] = i
		}
		shuffle.Shuffle(n, func(i, j int) { indices[i], indices[j] = indices[j], indices[i] })
		var epochLoss float64
		batches := 0
		for from := 0; from < n; from += bs {
			to := min(n, from+bs)
			b := to - from
			for r, idx := range indices[from:to] {
				copy(xb[r*dim:(r+1)*dim], x.Row(idx))
				yb[r] = train.Labels[idx]
			}
			epochLoss += m.gradient(xb[:b*dim], yb[:b], logits[:b*nc], gradW, gradB)
			batches++
			m.step(cfg, lr, gradW, gradB, velW, velB)
		}
		losses[epoch] = epochLoss / float64(batches)
		if epochDone != nil {
			epochDone()
		}
	}
	return m, losses, nil
}

// gradient computes the mean cross-entropy of one batch and its gradients with respect to W
// and B (overwriting gradW and gradB).
func (m *LinearModel) gradient(xb []float32, yb []int32, logits, gradW, gradB []float32) float64 {
	b, nc, dim := len(yb), m.NumClasses, m.Dim
	m.logits(xb, b, logits)
	// dlogits = (softmax - onehot)/b, in place; the softmax is taken in float64.
	var loss float64
	inv := 1 / float64(b)
	clear(gradB)
	for r := range b {
		row := logits[r*nc : (r+1)*nc]
		mx := float64(row[0])
		for _, v := range row {
			mx = max(mx, float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - mx)
		}
		logZ := mx + math.Log(sum)
		y := int(yb[r])
		loss += logZ - float64(row[y])
		for c, v := range row {
			p := math.Exp(float64(v) - logZ)
			if c == y {
				p--
			}
			row[c] = float32(p * inv)
			gradB[c] += row[c]
		}
	}
	// gradW = dlogitsᵀ · X: (nc × b) · (b × dim).
	sgemm(kernels.DefaultPool(), true, false, nc, dim, b, 1, logits, nc, xb, dim, 0, gradW, dim)
	return loss * inv
}

// logits computes W·x + B for b rows of x into out (b × NumClasses).
func (m *LinearModel) logits(x []float32, b int, out []float32) {
	nc, dim := m.NumClasses, m.Dim
	for r := range b {
		copy(out[r*nc:(r+1)*nc], m.B)
	}
	sgemm(kernels.DefaultPool(), false, true, b, nc, dim, 1, x, dim, m.W, dim, 1, out, nc)
}

// step applies one optimiser update with learning rate lr.
func (m *LinearModel) step(cfg LinearConfig, lr float32, gradW, gradB, velW, velB []float32) {
	mom, wd := float32(cfg.Momentum), float32(cfg.WeightDecay)
	if wd != 0 {
		for i, w := range m.W {
			gradW[i] += wd * w
		}
	}
	if cfg.Optimizer == LARS {
		// Trust ratio over the whole weight matrix, as MoCo v3's LARS does per parameter.
		wNorm, gNorm := math.Sqrt(sqNorm(m.W)), math.Sqrt(sqNorm(gradW))
		if wNorm > 0 && gNorm > 0 {
			q := float32(cfg.TrustCoefficient * wNorm / gNorm)
			for i := range gradW {
				gradW[i] *= q
			}
		}
	}
	for i, g := range gradW {
		velW[i] = mom*velW[i] + g
		m.W[i] -= lr * velW[i]
	}
	for i, g := range gradB {
		velB[i] = mom*velB[i] + g
		m.B[i] -= lr * velB[i]
	}
}

// featureStats returns each dimension's mean and population standard deviation (1 where the
// dimension is constant, so it passes through centred).
func featureStats(x Vectors) (mean, std []float32) {
	n, dim := x.Len(), x.Dim
	sum, sq := make([]float64, dim), make([]float64, dim)
	for i := range n {
		for d, v := range x.Row(i) {
			sum[d] += float64(v)
		}
	}
	mean, std = make([]float32, dim), make([]float32, dim)
	for d := range dim {
		sum[d] /= float64(n)
		mean[d] = float32(sum[d])
	}
	for i := range n {
		for d, v := range x.Row(i) {
			dv := float64(v) - sum[d]
			sq[d] += dv * dv
		}
	}
	for d := range dim {
		s := math.Sqrt(sq[d] / float64(n))
		if s == 0 {
			s = 1
		}
		std[d] = float32(s)
	}
	return mean, std
}

// standardize returns a standardised copy of x (x itself when the model has no statistics).
func (m *LinearModel) standardize(x Vectors) Vectors {
	if m.Mean == nil {
		return x
	}
	out := Vectors{Dim: x.Dim, Data: make([]float32, len(x.Data))}
	for i, v := range x.Data {
		d := i % x.Dim
		out.Data[i] = (v - m.Mean[d]) / m.Std[d]
	}
	return out
}

// Scores returns the class scores of every vector (Len × NumClasses).
func (m *LinearModel) Scores(v Vectors) ([]float32, error) {
	if v.Len() > 0 && v.Dim != m.Dim {
		return nil, fmt.Errorf("vectors have dimension %d, the model %d", v.Dim, m.Dim)
	}
	x := m.standardize(v)
	out := make([]float32, v.Len()*m.NumClasses)
	// In blocks, so the input copy and the output stay small for large sets.
	const block = 4096
	for from := 0; from < v.Len(); from += block {
		to := min(v.Len(), from+block)
		m.logits(x.Data[from*m.Dim:to*m.Dim], to-from, out[from*m.NumClasses:to*m.NumClasses])
	}
	return out, nil
}

// Evaluate returns the model's top-1 and top-5 accuracy on test, overall and per class;
// equal scores rank the lower class id first.
func (m *LinearModel) Evaluate(test LabeledVectors) (Accuracy, error) {
	if err := test.Validate(m.NumClasses); err != nil {
		return Accuracy{}, err
	}
	scores, err := m.Scores(test.Vectors)
	if err != nil {
		return Accuracy{}, fmt.Errorf("%s: %w", test.Source, err)
	}
	t := NewTally(m.NumClasses)
	row := make([]float64, m.NumClasses)
	for i, y := range test.Labels {
		for c, s := range scores[i*m.NumClasses : (i+1)*m.NumClasses] {
			row[c] = float64(s)
		}
		if err := t.Add(y, RankClasses(row, 5)); err != nil {
			return Accuracy{}, fmt.Errorf("%s: row %d: %w", test.Source, i, err)
		}
	}
	return t.Accuracy(), nil
}
