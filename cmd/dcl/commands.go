package main

// commands lists the subcommands in the order `dcl help` shows them.
func commands() []*command {
	return []*command{
		preprocessCommand(),
		trainCommand(),
		embedCommand(),
		exportCommand(),
		knnCommand(),
		linearCommand(),
		npcCommand(),
		tsneCommand(),
		lossCommand(),
		shardsCommand(),
		reproduceCommand(),
		demoCommand(),
		versionCommand(),
		doctorCommand(),
		gpuCheckCommand(),
		agreeCommand(),
	}
}
