package reproduce

import (
	"cmp"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// stepConfig is the trainer's step configuration of a run, the paper's defaults where the
// run leaves a setting zero: the one place a config's run becomes a trainstep.StepConfig
// (training, the untrained baseline and the config checks all read it).
func stepConfig(run RunConfig, channels int, dataset string) trainstep.StepConfig {
	paper := trainstep.PaperDefaults()
	return trainstep.StepConfig{
		Model:        trainstep.ModelConfig{Name: run.Model, BaseWidth: run.Width, Channels: channels, Dataset: cmp.Or(run.Normalization, dataset)},
		Method:       run.Method,
		MethodConfig: methodSettings(run.Params),
		Loss: trainstep.LossConfig{Kind: trainstep.LossKind(run.Loss), Temperature: run.Temperature,
			Params: run.Params, Reduction: trainstep.Mean},
		Optimizer: trainstep.OptimizerConfig{Kind: trainstep.OptimizerKind(cmp.Or(run.Optimizer, string(paper.Optimizer))),
			Momentum: deref(run.Momentum, paper.Momentum), WeightDecay: deref(run.WeightDecay, paper.WeightDecay)},
		InitSeed:  cmp.Or(run.Seed, 1),
		Precision: trainstep.Precision(run.Precision),
	}
}

// methodSettings are the values of params that a method declares: the run's other
// parameters are its loss's, which the loss configuration takes.
func methodSettings(params registry.Values) trainstep.MethodConfig {
	var out trainstep.MethodConfig
	for _, p := range trainstep.MethodParams() {
		if v, ok := params[p.Name]; ok {
			if out == nil {
				out = trainstep.MethodConfig{}
			}
			out[p.Name] = v
		}
	}
	return out
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
