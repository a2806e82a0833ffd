package main

// commands lists the subcommands in the order `dcl help` shows them.
func commands() []*command {
	return []*command{
		notBuilt("preprocess", "read a dataset, augment it and write Parquet shards of view pairs (Beam)", "issue 3"),
		trainCommand(),
		notBuilt("embed", "compute embeddings of a dataset with a trained encoder (Beam)", "issue 5"),
		notBuilt("knn", "weighted kNN accuracy of test embeddings against train embeddings (Beam)", "issue 5"),
		notBuilt("linear", "linear-probe accuracy on frozen embeddings", "issue 5"),
		notBuilt("npc", "negative-positive coupling statistics over batch sizes, the paper's Fig. 1 (Beam)", "issue 5"),
		notBuilt("loss", "evaluate a contrastive loss, its NPC multipliers and gradients on a JSON batch", "issue 5"),
		shardsCommand(),
		notBuilt("reproduce", "run a whole experiment from a YAML config: preprocess, train, evaluate, report", "issue 6"),
		notBuilt("demo", "a scaled-down reproduction on Fashion-MNIST with a report and plots", "issue 6"),
		versionCommand(),
	}
}

func notBuilt(name, summary, issue string) *command {
	return &command{name: name, summary: summary, pending: issue}
}
