package main

import "github.com/dcl-beam/dcl-beam/pipelines"

// commands lists the subcommands in the order `dcl help` shows them: the registered
// evaluations' (evaluationCommands) where the built-in ones stand, any other after them.
func commands() []*command {
	evals := map[string]*command{}
	var others []*command
	for _, c := range evaluationCommands() {
		switch c.name {
		case pipelines.EvalEmbed, pipelines.EvalKNN, pipelines.EvalLinear, pipelines.EvalNPC, pipelines.EvalTSNE:
			evals[c.name] = c
		default:
			others = append(others, c)
		}
	}
	list := []*command{
		preprocessCommand(),
		trainCommand(),
		evals[pipelines.EvalEmbed],
		exportCommand(),
		evals[pipelines.EvalKNN],
		evals[pipelines.EvalLinear],
		evals[pipelines.EvalNPC],
		evals[pipelines.EvalTSNE],
	}
	list = append(list, others...)
	return append(list,
		lossCommand(),
		shardsCommand(),
		reproduceCommand(),
		demoCommand(),
		versionCommand(),
		doctorCommand(),
		gpuCheckCommand(),
		agreeCommand(),
	)
}
