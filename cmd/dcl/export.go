package main

import (
	"context"
	"flag"
	"strings"

	"github.com/dcl-beam/dcl-beam/trainstep"
)

func exportCommand() *command {
	return &command{
		name:    "export",
		summary: "write a trained encoder as safetensors for PyTorch, with a module file that builds it (torchvision's ResNet names)",
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			checkpoint := fs.String("checkpoint", "", "checkpoint file, or a training run's folder for its newest checkpoint (local or gs://)")
			output := fs.String("output", "", "the .safetensors file to write; beside it a .json sidecar describing the input and a .py module file whose build() makes the model")
			projector := fs.Bool("projector", false, "also export the projector, under names starting with "+trainstep.ProjectorPrefix)
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no positional arguments, got %q", args)
				}
				if *checkpoint == "" || *output == "" {
					return usagef("--checkpoint and --output are required")
				}
				if !strings.HasSuffix(*output, trainstep.TorchExtension) {
					return usagef("--output=%s: want a name ending in %s", *output, trainstep.TorchExtension)
				}
				res, err := trainstep.SaveTorch(ctx, *checkpoint, *output, *projector)
				if err != nil {
					return err
				}
				return printJSON(out, res)
			}
		},
	}
}
