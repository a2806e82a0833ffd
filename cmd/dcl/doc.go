// Command dcl is the toolkit's one binary. Each subcommand (commands.go lists them, in the
// order `dcl help` shows them; the evaluations' come from pipelines' registry) parses its
// flags and calls into the packages that do the work; this package holds no logic of its
// own. The same binary is a Beam worker: started by a runner with --worker, beam.Init hands it
// to the SDK harness.
package main
