// Command dcl is the toolkit's one binary. Each subcommand (preprocess, train, embed, knn,
// linear, npc, loss, shards, reproduce, demo, doctor, gpu-check, version) parses its flags and
// calls into the packages that do the work; this package holds no logic of its own. The same
// binary is a Beam worker: started by a runner with --worker, beam.Init hands it to the SDK
// harness.
package main
