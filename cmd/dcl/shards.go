package main

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"

	"github.com/dcl-beam/dcl-beam/internal/rawname"
	"github.com/dcl-beam/dcl-beam/shards"
)

func shardsCommand() *command {
	return &command{
		name:    "shards",
		args:    "verify DIR | inspect DIR",
		summary: "verify or inspect a shard directory (subcommands: verify, inspect)",
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			rows := fs.Int("rows", 8, "inspect: number of rows (view pairs) to look at, from the start in manifest order")
			pngDir := fs.String("png", "", "inspect: folder (local or gs://) to write each row's views into as a PNG, side by side;\nwithout it, inspect only prints the rows")
			scale := fs.Int("scale", 0, "inspect: enlarge the views in the PNGs this many times (0: until the shorter side is at least 128 px)")
			return func(ctx context.Context, args []string) error {
				if len(args) != 2 {
					return usagef("want 'verify DIR' or 'inspect DIR', got %q", args)
				}
				dir := args[1]
				enc := json.NewEncoder(out.stdout)
				switch args[0] {
				case "verify":
					// The summary is printed whatever happens; the error, if any, goes to
					// stderr and makes the exit status 1.
					sum, err := shards.Verify(ctx, dir)
					if encErr := enc.Encode(rawname.Valid(sum)); encErr != nil {
						return encErr
					}
					return err
				case "inspect":
					if *rows < 1 {
						return usagef("--rows=%d: want at least 1", *rows)
					}
					got, err := shards.Inspect(ctx, dir, *pngDir, *rows, *scale)
					for _, r := range got {
						if encErr := enc.Encode(rawname.Valid(r)); encErr != nil {
							return encErr
						}
					}
					if err == nil && len(got) < *rows {
						slog.Info("the dataset has fewer rows than asked for", "dir", dir, "rows", len(got))
					}
					return err
				}
				return usagef("unknown shards subcommand %q: want verify or inspect", args[0])
			}
		},
	}
}
