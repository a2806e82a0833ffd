package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"

	"github.com/dcl-beam/dcl-beam/gpu/cuda"
)

func doctorCommand() *command {
	return &command{
		name:    "doctor",
		summary: "say which compute backends work here: CUDA plugin, libraries, driver, GPUs, and the fix for each problem",
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			plugin := fs.String("plugin", "", "CUDA PJRT plugin to check (default: search, as --backend=cuda does)")
			cpuPlugin := fs.String("xla-cpu-plugin", "", "XLA CPU PJRT plugin to check (default: search, as --backend=xla-cpu does)")
			asJSON := fs.Bool("json", false, "print the report as JSON")
			noLoad := fs.Bool("no-load", false, "do not load the plugin (only look at files)")
			strict := fs.Bool("strict", false, "exit 1 when CUDA is not available (default: always exit 0; the report says why)")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no arguments, got %q", args)
				}
				r := cuda.Diagnose(ctx, cuda.DiagnoseOptions{Plugin: *plugin, CPUPlugin: *cpuPlugin, NoLoad: *noLoad})
				if *asJSON {
					enc := json.NewEncoder(out.stdout)
					enc.SetIndent("", "  ")
					if err := enc.Encode(r); err != nil {
						return err
					}
				} else if _, err := fmt.Fprint(out.stdout, r.String()); err != nil {
					return err
				}
				if *strict && !r.Available {
					return errors.New("cuda: not available (" + r.Why + ")")
				}
				return nil
			}
		},
	}
}
