package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/dcl-beam/dcl-beam/internal/guard"
	"github.com/dcl-beam/dcl-beam/pipelines"
)

// guarded lists, for each command that writes, the flags of what it writes and of what it
// reads: command.run claims the outputs (package guard: the lock every writer takes, and the
// refusal of an output that is, holds or lies in an input) before the command starts.
// reproduce and demo claim their run directory themselves (reproduce.Run), with the inputs
// their config names.
var guarded = map[string]guardFlags{
	"preprocess": {outputs: []string{"output"}, inputs: []string{"input", "labels-file"}},
	"train":      {outputs: []string{"output"}, inputs: []string{"input", "knn-train", "knn-test"}},
	"embed":      {outputs: []string{"output"}, inputs: []string{"input"}, holders: []string{"checkpoint"}},
	"export":     {outputs: []string{"output"}, holders: []string{"checkpoint"}},
	"knn":        {outputs: []string{"output"}, inputs: []string{"train", "test"}},
	"linear":     {outputs: []string{"output"}, inputs: []string{"train", "test"}},
	"npc":        {outputs: []string{"output"}, inputs: []string{"input"}},
	"tsne":       {outputs: []string{"output"}, inputs: []string{"input"}},
	"gpu-check":  {outputs: []string{"output"}, inputs: []string{"input"}},
	// shards inspect DIR --png=OUT: the positional folder is read.
	"shards": {outputs: []string{"png"}, positional: true},
}

// guardFlags names a command's flags by their part (see guard.Claim).
type guardFlags struct {
	outputs, inputs, holders []string
	// positional: the last positional argument is an input too.
	positional bool
}

// claimOutputs claims what the command about to run writes, once its flags are parsed.
func claimOutputs(ctx context.Context, name string, fs *flag.FlagSet, args []string) (release func(), err error) {
	g, ok := guarded[name]
	// A dry run only translates the job: it writes nothing, so it claims nothing (on gs://
	// a claim would be a write to the bucket).
	if !ok || pipelines.DryRun() {
		return func() {}, nil
	}
	c := guard.Claim{Command: "dcl " + name, Logger: slog.Default()}
	c.Outputs = flagPaths(fs, g.outputs)
	c.Inputs = flagPaths(fs, g.inputs)
	c.Holders = flagPaths(fs, g.holders)
	if g.positional && len(args) > 0 {
		c.Inputs = append(c.Inputs, guard.Path{Path: args[len(args)-1]})
	}
	return guard.Acquire(ctx, c)
}

// flagPaths returns the paths the named flags hold: one per flag, or each of a list flag's.
func flagPaths(fs *flag.FlagSet, names []string) []guard.Path {
	var out []guard.Path
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		values := []string{f.Value.String()}
		if l, ok := f.Value.(interface{ Strings() []string }); ok {
			values = l.Strings()
		}
		for _, v := range values {
			if v != "" {
				out = append(out, guard.Path{Flag: "--" + name, Path: v})
			}
		}
	}
	return out
}
