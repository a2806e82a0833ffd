package reproduce

import (
	"context"
	"log/slog"

	"github.com/dcl-beam/dcl-beam/internal/guard"
)

// ErrLocked is Run's error when another command holds the run directory (or a folder in it,
// or one that holds it) and Options.WaitLock is off.
var ErrLocked = guard.ErrLocked

// lockRunDir claims the run directory out for a reproduction (package guard: the lock every
// writing command takes, and the refusal of a run directory that is, holds or lies in one of
// the inputs), waiting for it if wait, and returns its release.
func lockRunDir(ctx context.Context, out string, d DatasetConfig, wait bool, log *slog.Logger) (func(), error) {
	return guard.Acquire(ctx, runDirClaim(out, d, wait, log))
}

func runDirClaim(out string, d DatasetConfig, wait bool, log *slog.Logger) guard.Claim {
	c := guard.Claim{Command: "dcl reproduce", Outputs: []guard.Path{{Flag: "--output", Path: out}}, Wait: wait, Logger: log}
	c.Inputs = append(c.Inputs, guard.Path{Flag: "dataset.input", Path: d.Input})
	for _, split := range sortedKeys(d.Inputs) {
		c.Inputs = append(c.Inputs, guard.Path{Flag: "dataset.inputs." + split, Path: d.Inputs[split]})
	}
	return c
}
