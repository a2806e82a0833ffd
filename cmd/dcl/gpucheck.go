package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/verify"
)

func gpuCheckCommand() *command {
	return &command{
		name:    "gpu-check",
		summary: "check and time the GPU: CPU/CUDA agreement, training-step images/s beside PyTorch, shard-reader feeding, peak memory",
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			backend := fs.String("backend", "cuda", "backend under test: cuda, xla-cpu (the same code on XLA's CPU plugin, with --quick), or cpu (to try the check without XLA)")
			plugin := fs.String("plugin", "", gpu.PluginHelp)
			quick := fs.Bool("quick", false, "tiny models and batches: seconds on a CPU, to see the check work")
			data := fs.String("input", "", "folder of Fashion-MNIST's four .gz IDX files for the feeding test (default: random images)")
			photos := fs.String("photos", "", "folder of photographs for the 224 px JPEG feeding test (scripts/photos.sh; default: --input's images, upscaled)")
			outDir := fs.String("output", "gpu-check-out", "folder for gpu-check.json and gpu-check.md")
			renamedFlag(fs, out, "data", "input")
			renamedFlag(fs, out, "out", "output")
			torch := fs.String("torch", "", "scripts/torch_step.py's JSON, to put PyTorch's figures and the ratios in the tables")
			warmup := fs.Int("warmup", 0, "untimed steps before timing each row (0: 5, or 1 with --quick)")
			steps := fs.Int("steps", 0, "timed steps per row (0: 20, or 2 with --quick)")
			skip := fs.String("skip", "", "comma-separated parts to leave out: agreement, speed, packing, loop, feeding")
			record := fs.String("record", "", "commands to record in the report, separated by ';;' (scripts/gpu-check.sh passes what it ran)")
			return func(ctx context.Context, args []string) error {
				// A child process of the check (see verify.PhaseEnv): run the one phase.
				if verify.IsPhase() {
					return verify.RunPhase(ctx)
				}
				if len(args) > 0 {
					return usagef("takes no arguments, got %q", args)
				}
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("finding this program to re-run its phases: %w", err)
				}
				cfg := verify.CheckConfig{Backend: *backend, Plugin: *plugin, Quick: *quick, Data: *data, Photos: *photos, Out: *outDir, Torch: *torch,
					Self: []string{exe, "gpu-check"}, Warmup: *warmup, Steps: *steps, Log: out.stderr}
				if *skip != "" {
					cfg.Skip = strings.Split(*skip, ",")
				}
				cfg.Commands = []string{"dcl " + strings.Join(os.Args[1:], " ")}
				if *record != "" {
					cfg.Commands = append(strings.Split(*record, ";;"), cfg.Commands...)
				}
				r, err := verify.Check(ctx, cfg)
				if r != nil {
					fmt.Fprint(out.stdout, r.Markdown())
					if *outDir != "" {
						fmt.Fprintf(out.stderr, "gpu-check: wrote %s/gpu-check.json and %s/gpu-check.md\n", *outDir, *outDir)
					}
				}
				return err
			}
		},
	}
}
