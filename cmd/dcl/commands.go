package main

// commands lists the subcommands in the order `dcl help` shows them.
func commands() []*command {
	return []*command{
		preprocessCommand(),
		trainCommand(),
		embedCommand(),
		knnCommand(),
		linearCommand(),
		npcCommand(),
		lossCommand(),
		shardsCommand(),
		notBuilt("reproduce", "run a whole experiment from a YAML config: preprocess, train, evaluate, report", "issue 6"),
		notBuilt("demo", "a scaled-down reproduction on Fashion-MNIST with a report and plots", "issue 6"),
		versionCommand(),
	}
}

func notBuilt(name, summary, issue string) *command {
	return &command{name: name, summary: summary, pending: issue}
}
