package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/dcl-beam/dcl-beam/experiments"
	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/reproduce"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// DemoConfig is the built-in experiment behind `dcl demo` and `make demo`.
const DemoConfig = "demo-fashion-mnist"

// DefaultFashionMNIST is where Debian's dataset-fashion-mnist package puts the IDX files.
const DefaultFashionMNIST = "/usr/share/datasets/fashion-mnist"

// reproduceFlags are the flags `reproduce` and `demo` share.
type reproduceFlags struct {
	out, input, backend, plugin, rerun      *string
	stageTimes, saveState, restoreState     *string
	trainLog, rerunOnCodeChange, gate, plan *bool
	waitLock                                *bool
	progress                                func(streams) (progress.Options, error)
	// pack is --pack (trainstep.PackSetting), when given.
	pack func() (registry.Settings, error)
	// sets are the --set KEY=VALUE overrides of the config's keys, in order.
	sets *[]reproduce.Override
}

func addReproduceFlags(fs *flag.FlagSet, out streams, defaultOut, inputUsage string) reproduceFlags {
	f := reproduceFlags{
		out:      fs.String("output", defaultOut, "run directory: every stage's output, results.json, report.md, plots/, history/ (local or gs://)"),
		input:    fs.String("input", "", inputUsage),
		backend:  fs.String("backend", "", "compute backend for every run (overrides the config): "+gpu.BackendsHelp),
		plugin:   fs.String("plugin", "", gpu.PluginHelp),
		progress: addProgressFlags(fs),
		trainLog: fs.Bool("train-log", false, "also print every training step's JSON line on stderr (always in each run's train.jsonl)"),
		rerun: fs.String("rerun", "", "recompute these stages even where complete, and what depends on them: a comma-separated list of "+
			strings.Join(reproduce.StageNames(), ", ")+", or one run's stage as --plan names it (\"train dcl\": that run alone)"),
		rerunOnCodeChange: fs.Bool("rerun-on-code-change", false, "recompute every output that another version of dcl made"),
		gate:              fs.Bool("gate", false, "exit 3 when one of the config's gates fails (after writing everything)"),
		plan:              fs.Bool("plan", false, "print which stages a run would skip and run, and why; run and write nothing"),
		waitLock:          fs.Bool("wait-lock", false, "if another dcl reproduce is using --output, wait for it to finish instead of exiting"),
		stageTimes:        fs.String("stage-times", "", "also write the seconds and images/s of every stage that ran, with the machine and the config, to this JSON file"),
		saveState: fs.String("save-state", "", "write to this file (.tgz) what another machine needs to continue the reproduction in --output "+
			"(ledger, history, report, plots, finished runs' logs and evaluations; not the data, checkpoints or embeddings), and exit"),
		restoreState: fs.String("restore-state", "", "before running, unpack a --save-state file into --output when it holds no reproduction yet"),
	}
	f.pack = registry.SettingFlags(fs, fs.Name(), []registry.Param{trainstep.PackSetting()})
	renamedFlag(fs, out, "out", "output")
	f.sets = new([]reproduce.Override)
	fs.Func("set", "KEY=VALUE: set a config key, KEY its dotted path, VALUE as YAML reads it (--set train.defaults.epochs=3\n"+
		"--set evaluate.knn.k=20 --set train.runs.0.loss=dcl); repeatable, later ones win; the report lists them", func(v string) error {
		o, err := reproduce.ParseOverride(v)
		if err != nil {
			return err
		}
		*f.sets = append(*f.sets, o)
		return nil
	})
	return f
}

// reproduceExitCodes are documented in `dcl reproduce -h` and `dcl demo -h`.
const reproduceExitCodes = `Exit status: 0 every stage succeeded (and, with --gate, every gate checked passed; a gate with
no figure to compare with, as on the first reproduction, is not checked, and a warning says so);
1 a stage failed (or --output is in use by another dcl reproduce); 2 bad command line or config;
3 a gate failed (--gate), after everything was written.`

func reproduceCommand() *command {
	return &command{
		name:    "reproduce",
		summary: "run a whole experiment from a YAML config: preprocess, train, evaluate, report",
		details: reproduceExitCodes,
		beam:    true,
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			config := fs.String("config", "", "experiment config: a YAML file, or the name of a built-in one ("+strings.Join(experiments.Names(), ", ")+")")
			f := addReproduceFlags(fs, out, "", "where the dataset's published files are (overrides the config's dataset.input)")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no positional arguments, got %q", args)
				}
				if *config == "" {
					return usagef("--config is required (a YAML file or one of %s)", strings.Join(experiments.Names(), ", "))
				}
				cfg, err := loadConfig(*config, *f.sets)
				if err != nil {
					return err
				}
				if *f.out == "" {
					*f.out = filepath.Join("runs", cfg.Name)
				}
				return runReproduction(ctx, cfg, f, out)
			}
		},
	}
}

func demoCommand() *command {
	return &command{
		name:    "demo",
		summary: "a scaled-down reproduction on Fashion-MNIST with a report and plots",
		details: reproduceExitCodes,
		beam:    true,
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			f := addReproduceFlags(fs, out, "demo-out", "folder of the Fashion-MNIST IDX files ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz])")
			renamedFlag(fs, out, "data", "input")
			*f.input, fs.Lookup("input").DefValue = DefaultFashionMNIST, DefaultFashionMNIST
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no positional arguments, got %q", args)
				}
				data := f.input
				if _, err := os.Stat(filepath.Join(*data, "train-images-idx3-ubyte.gz")); err != nil && storage.Scheme(*data) == "" {
					if _, err2 := os.Stat(filepath.Join(*data, "train-images-idx3-ubyte")); err2 != nil {
						return fmt.Errorf("Fashion-MNIST is not in %s: install Debian's package (sudo apt-get install dataset-fashion-mnist) or pass --input=PATH to a folder with the four IDX files", *data)
					}
				}
				cfg, err := loadConfig(DemoConfig, *f.sets)
				if err != nil {
					return err
				}
				return runReproduction(ctx, cfg, f, out)
			}
		},
	}
}

// loadConfig reads a config file, or a built-in config by name, with the overrides of its
// keys.
func loadConfig(name string, sets []reproduce.Override) (*reproduce.Config, error) {
	// A named pipe would block the open until some other process writes to it (signals
	// included), and a device would stream forever.
	if st, err := os.Stat(name); err == nil && !st.Mode().IsRegular() {
		return nil, usagef("--config=%s: not a regular file (%s)", name, st.Mode().Type())
	}
	var r io.ReadCloser
	file, err := os.Open(name)
	switch {
	case err == nil:
		r = file
	case errors.Is(err, fs.ErrNotExist) && !strings.ContainsAny(name, "/."):
		if r, err = experiments.Open(name); err != nil {
			return nil, usagef("--config=%s: no such file, and no built-in config of that name (built in: %s)", name, strings.Join(experiments.Names(), ", "))
		}
	default:
		return nil, usagef("--config: %v", err)
	}
	defer r.Close()
	cfg, err := reproduce.ParseWith(r, name, sets)
	if err != nil {
		return nil, usagef("%w", err)
	}
	return cfg, nil
}

func runReproduction(ctx context.Context, cfg *reproduce.Config, f reproduceFlags, out streams) error {
	display, err := f.progress(out)
	if err != nil {
		return err
	}
	// The config's Beam flags (runner, project, …) apply to every Beam stage, as if given on
	// the command line; flags given on the command line win.
	given := map[string]bool{}
	flag.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for _, a := range cfg.Preprocess.BeamFlags {
		name, value, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !ok {
			value = "true"
		}
		if flag.Lookup(name) == nil {
			return usagef("preprocess.beam_flags: %q is not a Beam flag", a)
		}
		if !given[name] {
			if err := flag.Set(name, value); err != nil {
				return usagef("preprocess.beam_flags: %q: %v", a, err)
			}
		}
	}
	rerun, rerunStages, err := reproduce.ParseRerun(*f.rerun)
	if err != nil {
		return usagef("--rerun: %v", err)
	}
	opts := reproduce.Options{
		Out: *f.out, Input: *f.input, Backend: *f.backend, Plugin: *f.plugin, CodeVersion: codeIdentity(),
		Rerun: rerun, RerunStages: rerunStages, RerunOnCodeChange: *f.rerunOnCodeChange, WaitLock: *f.waitLock,
		Stderr: out.stderr, Progress: display, TrainLog: *f.trainLog, Logger: slog.Default(), StageTimes: *f.stageTimes,
	}
	if *f.restoreState != "" && *f.plan {
		// The plan writes nothing, and a restore writes the run directory.
		return usagef("--plan with --restore-state: --plan writes nothing, and --restore-state unpacks into --output; restore first (a run with --restore-state), then plan")
	}
	packFlag, err := f.pack()
	if err != nil {
		return err
	}
	if v, ok := packFlag.Given(trainstep.SettingPack); ok {
		pack := v.(trainstep.Pack)
		opts.Pack = &pack
	}
	if *f.saveState != "" {
		return saveState(ctx, cfg, *f.out, *f.saveState, out)
	}
	if *f.restoreState != "" {
		if err := restoreState(ctx, *f.out, *f.restoreState); err != nil {
			return err
		}
	}
	if *f.plan {
		stages, err := reproduce.Plan(ctx, cfg, opts)
		if err != nil {
			return err
		}
		packs, err := reproduce.PlanPacks(cfg, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(out.stdout, "%s in %s (dcl %s):\n", cfg.Name, *f.out, opts.CodeVersion)
		if err := reproduce.WritePlan(out.stdout, stages); err != nil {
			return err
		}
		setting := cfg.Train.Pack
		if opts.Pack != nil {
			setting = *opts.Pack
		}
		if err := reproduce.WritePacks(out.stdout, setting, packs); err != nil {
			return err
		}
		// A script that plans before it runs must not go on to a run that would stop: the
		// plan says why, the exit status that it would.
		if last := stages[len(stages)-1]; last.Refused {
			return fmt.Errorf("a run would stop at %s (the plan above says why)", last.Name)
		}
		return nil
	}
	res, err := reproduce.Run(ctx, cfg, opts)
	if errors.Is(err, reproduce.ErrLocked) {
		return fmt.Errorf("%w: wait for it to finish, or pass --wait-lock to wait for it", err)
	}
	if err != nil {
		return err
	}
	// The figures go to stderr with the stages' lines: stdout is for --plan's plan only.
	for _, r := range res.Runs {
		fmt.Fprintf(out.stderr, "%s: %s\n", r.Config.Name, evaluationLine(r.Evaluation))
	}
	for _, b := range res.Baselines {
		fmt.Fprintf(out.stderr, "%s (baseline): %s\n", b.Name, evaluationLine(b.Evaluation))
	}
	fmt.Fprintf(out.stderr, "%s: %d runs, %d baselines in %s; report %s\n", res.Experiment, len(res.Runs), len(res.Baselines),
		res.Wall, storage.Join(*f.out, reproduce.ReportName))
	for _, w := range res.GateWarnings {
		fmt.Fprintf(out.stderr, "dcl: warning: %s\n", w)
	}
	if len(res.Gates) == 0 && len(res.GatesNotChecked) > 0 {
		fmt.Fprintf(out.stderr, "dcl: warning: no gate was checked: none had a figure to compare with (an exit status 0 says nothing of them)\n")
	}
	for _, n := range res.GatesNotChecked {
		fmt.Fprintf(out.stderr, "dcl: warning: %s\n", n)
	}
	failed := res.FailedGates()
	if len(failed) == 0 {
		return nil
	}
	msgs := make([]string, len(failed))
	for i, g := range failed {
		msgs[i] = g.String()
	}
	gateErr := fmt.Errorf("%d of %d gates failed (everything was written):\n  %s", len(failed), len(res.Gates), strings.Join(msgs, "\n  "))
	if !*f.gate {
		fmt.Fprintf(out.stderr, "dcl: warning: %v\n(exit status 0 without --gate)\n", gateErr)
		return nil
	}
	return &exitCodeError{code: exitGate, err: gateErr}
}

// evaluationLine is one run's final figures: kNN and linear top-1 and top-5.
func evaluationLine(e reproduce.Evaluation) string {
	var parts []string
	if e.KNN != nil {
		parts = append(parts, fmt.Sprintf("kNN top-1 %.2f%%, top-5 %.2f%%", e.KNN.Top1, e.KNN.Top5))
	}
	if e.Linear != nil {
		parts = append(parts, fmt.Sprintf("linear top-1 %.2f%%, top-5 %.2f%%", e.Linear.Top1, e.Linear.Top5))
	}
	if len(parts) == 0 {
		return "not evaluated"
	}
	return strings.Join(parts, "; ")
}

// saveState writes reproduce.SaveState of the run directory to file, atomically.
func saveState(ctx context.Context, cfg *reproduce.Config, out, file string, s streams) error {
	if err := storage.Create(ctx, file, func(w io.Writer) error { return reproduce.SaveState(ctx, cfg, out, w) }); err != nil {
		return fmt.Errorf("saving the state of %s: %w", out, err)
	}
	size, err := storage.Size(ctx, file)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "%s: the state of %s (%.1f MiB); continue elsewhere with --restore-state=%s\n", file, out, float64(size)/(1<<20), file)
	return nil
}

// restoreState unpacks a saved state into the run directory, unless it already holds a
// reproduction, whose own state is the newer (said on the log).
func restoreState(ctx context.Context, out, file string) error {
	rd, err := storage.Open(ctx, file)
	if err != nil {
		return fmt.Errorf("--restore-state: %w", err)
	}
	defer rd.Close()
	err = reproduce.RestoreState(ctx, out, rd, file)
	switch {
	case errors.Is(err, reproduce.ErrNotEmpty):
		slog.Info("--restore-state: the run directory holds a reproduction already; continuing from it", "state", file, "output", out)
		return nil
	case err != nil:
		return err
	}
	slog.Info("restored the state of an earlier reproduction", "state", file, "output", out)
	return nil
}
