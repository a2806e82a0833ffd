package main

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/rawname"
	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/pipelines"
)

// The evaluation subcommands (embed, knn, linear, npc, tsne and any other registered
// evaluation) are built from their registrations (pipelines.Evaluation): the flags and help
// from the declared parameters, then one skeleton: check the command line, run, print the
// result as one JSON document on stdout. Those that build Beam pipelines, like preprocess,
// keep Beam's and prism's informational logs out of stderr (quietBeamLogs) and report a
// failed job in one line.

// evaluationCommands are the commands of the registered evaluations, in registration order.
func evaluationCommands() []*command {
	var out []*command
	for _, ev := range pipelines.Evaluations() {
		out = append(out, evaluationCommand(ev))
	}
	return out
}

func evaluationCommand(ev pipelines.Evaluation) *command {
	return &command{
		name:    ev.Name,
		summary: ev.Summary,
		details: ev.Details,
		beam:    ev.Beam,
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			settings := registry.SettingFlags(fs, ev.Name, ev.Params)
			var required []registry.Param
			for _, p := range ev.Params {
				if p.Renamed != "" {
					renamedFlag(fs, out, p.Renamed, p.Flag())
				}
				if p.Required {
					required = append(required, p)
				}
			}
			progressOptions := func(streams) (progress.Options, error) { return progress.Options{}, nil }
			if ev.Beam {
				progressOptions = addProgressFlags(fs)
			}
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no positional arguments, got %q", args)
				}
				s, err := settings()
				if err != nil {
					return err
				}
				for _, p := range required {
					if s.Empty(p.Name) {
						return usagef("%s", requiredFlags(required))
					}
				}
				display, err := progressOptions(out)
				if err != nil {
					return err
				}
				res, err := ev.Run(ctx, s, pipelines.Env{Progress: display, Stderr: out.stderr, CodeVersion: codeVersion()})
				if err != nil || res == nil {
					if ev.Beam {
						return submitted(err, s.String("output"))
					}
					return err
				}
				return printJSON(out, res)
			}
		},
	}
}

// requiredFlags says which flags a command needs: "--a and --b are required".
func requiredFlags(params []registry.Param) string {
	names := make([]string, len(params))
	for i, p := range params {
		names[i] = "--" + p.Flag()
	}
	if len(names) == 1 {
		return names[0] + " is required"
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " are required"
}

// submitted passes err on; without one the job was only translated (--dry_run) or submitted
// (--async), which it says on stderr.
func submitted(err error, output string) error {
	if err == nil {
		slog.Info("job translated or submitted, not run here; its result will be written to --output", "output", output)
	}
	return err
}

func printJSON(out streams, v any) error {
	return json.NewEncoder(out.stdout).Encode(rawname.Valid(v)) // paths as given, as text
}
