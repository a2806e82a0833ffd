package trainstep

// Hyperparameters are the settings of a pretraining run that the paper fixes (Section 4.1,
// CIFAR and STL-10: SGD with momentum 0.9, weight decay 5e-4, learning rate 0.03 per 256
// pairs with cosine annealing, batch 256, 200 epochs, τ = 0.07; DCLW's σ = 0.5 is its
// declared default, as every loss parameter's is: LossSpec.Params). They are the defaults of
// the training settings (TrainSettings), which the command line's flags and reproduce's runs
// both read.
type Hyperparameters struct {
	Loss        LossKind
	Temperature float64
	BatchSize   int
	Epochs      int
	// BaseLR is the learning rate per 256 view pairs: the peak is BaseLR·batch/256.
	BaseLR      float64
	Optimizer   OptimizerKind
	Momentum    float64
	WeightDecay float64
	// CheckpointEvery is the steps between checkpoints.
	CheckpointEvery int
}

// PaperDefaults returns the paper's CIFAR and STL-10 pretraining settings.
func PaperDefaults() Hyperparameters {
	return Hyperparameters{
		Loss: DCL, Temperature: 0.07, BatchSize: 256, Epochs: 200, BaseLR: 0.03,
		Optimizer: SGDMomentum, Momentum: 0.9, WeightDecay: 5e-4, CheckpointEvery: 500,
	}
}

// LossConfig is the loss of these settings (mean reduction, the loss's declared parameter
// defaults, the gradient through DCLW's weights).
func (h Hyperparameters) LossConfig() LossConfig {
	return LossConfig{Kind: h.Loss, Temperature: h.Temperature, Reduction: Mean, WeightGrad: true}
}

// OptimizerConfig is the optimiser of these settings.
func (h Hyperparameters) OptimizerConfig() OptimizerConfig {
	return OptimizerConfig{Kind: h.Optimizer, Momentum: h.Momentum, WeightDecay: h.WeightDecay}
}
