package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

func trainCommand() *command {
	return &command{
		name:    "train",
		summary: "pretrain an encoder with InfoNCE, DCL or DCLW on shards (CPU or CUDA)",
		setup:   setupTrain,
	}
}

// registerSettingFlags registers one flag per setting of settings and per parameter the
// registered losses (and, with methods, the training methods) declare, each with its
// declaration's help and default; the returned function, called after parsing, puts what the
// command line gives, and the defaults of the rest, into t (trainstep.ApplySettings).
func registerSettingFlags(fs *flag.FlagSet, settings []trainstep.Setting, methods bool) func(t *trainstep.ShardTraining) error {
	given := registry.SettingFlags(fs, fs.Name(), trainstep.SettingParams(settings))
	lossParams := registry.AddFlags(fs, "loss", trainstep.LossVariants())
	methodParams := func() registry.Values { return nil }
	if methods {
		methodParams = registry.AddFlags(fs, "method", trainstep.MethodVariants())
	}
	return func(t *trainstep.ShardTraining) error {
		s, err := given()
		if err != nil {
			return err
		}
		values := map[string]any{}
		for _, name := range s.GivenNames() {
			values[name], _ = s.Given(name)
		}
		for _, params := range []registry.Values{lossParams(), methodParams()} {
			for name, v := range params {
				values[name] = v
			}
		}
		if err := trainstep.ApplySettings(t, values); err != nil {
			return usagef("%w", err)
		}
		return nil
	}
}

// resumeFlag is --resume: bare, it resumes from the newest checkpoint in --output; with a value,
// from that checkpoint file or run folder.
type resumeFlag struct {
	from   string
	latest bool // bare --resume: the run folder's newest checkpoint
}

func (f *resumeFlag) String() string { return f.from }
func (f *resumeFlag) Set(s string) error {
	if b, err := strconv.ParseBool(s); err == nil {
		f.from, f.latest = "", b
		return nil
	}
	f.from, f.latest = s, false
	return nil
}
func (f *resumeFlag) IsBoolFlag() bool { return true }

func setupTrain(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
	data := fs.String("input", "", "shard folder of view pairs written by 'dcl preprocess' (local or gs://); required")
	outDir := fs.String("output", "", "run folder to write: checkpoints/, train.jsonl, summary.json, TensorBoard events (local or gs://); required")
	renamedFlag(fs, out, "data", "input")
	renamedFlag(fs, out, "out", "output")
	settings := registerSettingFlags(fs, trainstep.TrainSettings(), true)
	plugin := fs.String("plugin", "", gpu.PluginHelp)
	var resume resumeFlag
	fs.Var(&resume, "resume", "continue a run: bare, from the newest checkpoint in --output; =PATH, from that checkpoint file or run folder")
	knnEvery := fs.Int("knn-every", 0, "run a kNN monitor every N epochs (0: never); needs --knn-train")
	knnData := fs.String("knn-train", "", "labelled shard folder (preset none) whose backbone features vote in the kNN monitor (as 'dcl knn --train')")
	knnTest := fs.String("knn-test", "", "labelled shard folder classified by the kNN monitor (empty: every 10th image of --knn-train)")
	knnBank := fs.Int("knn-bank", trainstep.DefaultKNNBank, "images of --knn-train that vote in the kNN monitor: a fixed sample (seed --knn-seed)")
	knnQueries := fs.Int("knn-queries", trainstep.DefaultKNNQueries, "images of --knn-test the kNN monitor classifies: a fixed sample")
	knnSeed := fs.Uint64("knn-seed", trainstep.DefaultKNNSeed, "seed of the kNN monitor's samples")
	knnFull := fs.Bool("knn-full", false, "the kNN monitor embeds every image of --knn-train and --knn-test (costly on a CPU)")
	knnLinear := fs.Bool("knn-linear", false, "the monitor also fits a linear classifier to the bank's features and classifies the queries (linear_top1 in the log: the linear accuracy during training)")
	renamedFlag(fs, out, "knn-data", "knn-train")
	asJSON := fs.Bool("json", false, "also print every line of the training log (train.jsonl) on stdout")
	progressOptions := addProgressFlags(fs)

	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("takes no positional arguments, got %q", args)
		}
		if *data == "" || *outDir == "" {
			return usagef("--input and --output are required")
		}
		if *knnEvery > 0 && *knnData == "" {
			return usagef("--knn-every=%d needs --knn-train", *knnEvery)
		}
		if *knnBank < 1 || *knnQueries < 1 {
			return usagef("--knn-bank=%d and --knn-queries=%d: want at least 1 each (--knn-full for every image)", *knnBank, *knnQueries)
		}
		training := trainstep.ShardTraining{Plugin: *plugin, KNNData: *knnData, KNNTest: *knnTest,
			KNN: trainstep.KNNMonitorOptions{Bank: *knnBank, Queries: *knnQueries, Seed: *knnSeed, Full: *knnFull, Linear: *knnLinear}}
		training.Step.Model.Channels = 3
		training.Run.Data, training.Run.Out, training.Run.MonitorEvery = *data, *outDir, *knnEvery
		if err := settings(&training); err != nil {
			return err
		}
		if err := training.Step.Validate(); err != nil {
			return usagef("%w", err)
		}
		if err := training.Run.Validate(); err != nil {
			return usagef("%w", err)
		}
		display, err := progressOptions(out)
		if err != nil {
			return err
		}
		var log io.Writer
		if *asJSON {
			log = out.stdout
			// A pipe whose reader leaves (`| head -1`) must not kill the run before its
			// checkpoint: the write fails with EPIPE instead, and the copy stops.
			signal.Ignore(syscall.SIGPIPE)
		}

		training.Resume = resume.from
		if resume.latest {
			training.Resume = *outDir
		}
		training.Log, training.Progress = log, display
		sum, err := trainstep.TrainOnShards(ctx, training)
		if err != nil {
			return setupOr(err)
		}
		// stdout holds only the log's lines (with --json): the summary is for the reader.
		fmt.Fprintln(out.stderr, trainSummary(sum))
		return nil
	}
}

// trainSummary is the line a training run ends with: where it stands and its last figures.
func trainSummary(sum *trainstep.Summary) string {
	state := "stopped"
	if sum.Finished {
		state = "finished"
	}
	epochs := ""
	if sum.StepsPerEpoch > 0 {
		epochs = fmt.Sprintf(", %d of %d epochs completed", sum.Epoch, sum.TotalSteps/sum.StepsPerEpoch)
	}
	line := fmt.Sprintf("train: %s after %d of %d steps%s: loss %.4g, mean q %.4g", state, sum.StepsDone, sum.TotalSteps, epochs, sum.Loss, sum.MeanQ)
	if top1, ok := sum.Monitor["knn_top1"].(float64); ok {
		line += fmt.Sprintf(", kNN top-1 %.2f%%", top1)
		if top5, ok := sum.Monitor["knn_top5"].(float64); ok {
			line += fmt.Sprintf(", top-5 %.2f%%", top5)
		}
	}
	return line + "; checkpoint " + sum.Checkpoint
}

// setupOr turns a trainstep.SetupError (settings that do not fit the data or the checkpoint)
// into a command-line error (exit 2); other errors stay failures (exit 1).
func setupOr(err error) error {
	var setup *trainstep.SetupError
	if errors.As(err, &setup) {
		return usagef("%w", setup)
	}
	return err
}
