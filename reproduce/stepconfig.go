package reproduce

import (
	"cmp"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// stepConfig is the trainer's step configuration of a run, the paper's defaults where the
// run leaves a setting zero: the one place a config's run becomes a trainstep.StepConfig
// (training, the untrained baseline and the config checks all read it).
func stepConfig(run RunConfig, channels int, dataset string) trainstep.StepConfig {
	paper := trainstep.PaperDefaults()
	return trainstep.StepConfig{
		Model:  trainstep.ModelConfig{Name: run.Model, BaseWidth: run.Width, Channels: channels, Dataset: cmp.Or(run.Normalization, dataset)},
		Method: run.Method,
		MethodConfig: trainstep.MethodConfig{QueueSize: run.QueueSize, MomentumEMA: run.MomentumEMA, Symmetric: run.Symmetric,
			BNSplits: run.BNSplits, PredictorHidden: run.PredictorHidden},
		Loss: trainstep.LossConfig{Kind: trainstep.LossKind(run.Loss), Temperature: run.Temperature,
			Sigma: cmp.Or(run.Sigma, paper.Sigma), Delta: cmp.Or(run.Delta, paper.Delta),
			Alpha: cmp.Or(run.AlignAlpha, paper.Alpha), UniformT: cmp.Or(run.UniformT, paper.UniformT), Reduction: trainstep.Mean},
		Optimizer: trainstep.OptimizerConfig{Kind: trainstep.OptimizerKind(cmp.Or(run.Optimizer, string(paper.Optimizer))),
			Momentum: deref(run.Momentum, paper.Momentum), WeightDecay: deref(run.WeightDecay, paper.WeightDecay)},
		InitSeed:  cmp.Or(run.Seed, 1),
		Precision: trainstep.Precision(run.Precision),
	}
}

// runLabel is how the report names a run's training: the loss as the paper's tables name it,
// after the method where it is not SimCLR, e.g. "MoCo-v2 (DCL)".
func runLabel(run RunConfig) string {
	name := lossName(run.Loss)
	if spec, err := trainstep.LookupMethod(run.Method); err == nil && spec.Name != trainstep.SimCLRMethod {
		return spec.Display + " (" + name + ")"
	}
	return name
}
