package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"strings"
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

// registerMethodFlags registers one flag per setting the training methods declare; one the
// command line leaves out takes the method's default, which the help shows.
func registerMethodFlags(fs *flag.FlagSet) func() trainstep.MethodConfig {
	values := registry.AddFlags(fs, "method", trainstep.MethodVariants())
	return func() trainstep.MethodConfig { return trainstep.MethodConfig(values()) }
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
	model := fs.String("model", trainstep.ResNet18CIFAR, "encoder: "+strings.Join(trainstep.ModelNames(), ", "))
	width := fs.Int("width", 0, "base channel width of the encoder (0: the model's default, 64 for the ResNets, 32 for small-cnn)")
	projDim := fs.Int("projection-dim", trainstep.DefaultProjectionDim, "projector output dimension")
	paper := trainstep.PaperDefaults()
	method := fs.String("method", trainstep.SimCLRMethod, "training method: "+strings.Join(trainstep.MethodNames(), ", "))
	methodConfig := registerMethodFlags(fs)
	precision := fs.String("precision", "", "arithmetic: float32 (full float32 everywhere, the paper's V100 arithmetic), tf32 (float32 with\nconvolutions and matrix products on TF32 tensor cores: PyTorch's default for cuDNN convolutions;\nfull float32 on the CPU), or bf16 (mixed precision, float32 master weights; for GPUs);\nempty: float32, or the checkpoint's when resuming")
	lossConfig := registerLossFlags(fs)
	batch := fs.Int("batch-size", paper.BatchSize, "view pairs per step (2× as many images through the network)")
	epochs := fs.Int("epochs", paper.Epochs, "epochs; epoch e reads the shards' augmented pass e mod E")
	lr := fs.Float64("lr", paper.BaseLR, "base learning rate per 256 view pairs: the peak is lr·batch/256")
	momentum := fs.Float64("momentum", paper.Momentum, "SGD momentum")
	wd := fs.Float64("weight-decay", paper.WeightDecay, "weight decay (convolution and dense weights only, unless --decay-all)")
	decayAll := fs.Bool("decay-all", false, "apply weight decay (and LARS scaling) to biases and batch-norm parameters too")
	warmup := fs.Float64("warmup-epochs", 0, "linear learning-rate warm-up, in epochs (may be fractional); cosine annealing after")
	optimizer := fs.String("optimizer", string(paper.Optimizer), "sgd (with momentum) or lars (for large batches)")
	backendName := fs.String("backend", "auto", "compute backend: "+gpu.BackendsHelp)
	plugin := fs.String("plugin", "", gpu.PluginHelp)
	ckptEvery := fs.Int("checkpoint-every", paper.CheckpointEvery, "write a checkpoint every N steps (0: only at the end and when interrupted)")
	keep := fs.Int("keep-checkpoints", 3, "checkpoints to keep, newest first (0: all)")
	var resume resumeFlag
	fs.Var(&resume, "resume", "continue a run: bare, from the newest checkpoint in --output; =PATH, from that checkpoint file or run folder")
	seed := fs.Uint64("seed", 1, "seed of the data order (and of the initial weights unless --init-seed)")
	initSeed := fs.Uint64("init-seed", 0, "seed of the initial weights (0: --seed; when resuming, the checkpoint's)")
	maxSteps := fs.Int("max-steps", 0, "stop (with a checkpoint) after this many steps in total; --resume continues")
	knnEvery := fs.Int("knn-every", 0, "run a kNN monitor every N epochs (0: never); needs --knn-train")
	knnData := fs.String("knn-train", "", "labelled shard folder (preset none) whose backbone features vote in the kNN monitor (as 'dcl knn --train')")
	knnTest := fs.String("knn-test", "", "labelled shard folder classified by the kNN monitor (empty: every 10th image of --knn-train)")
	knnBank := fs.Int("knn-bank", trainstep.DefaultKNNBank, "images of --knn-train that vote in the kNN monitor: a fixed sample (seed --knn-seed)")
	knnQueries := fs.Int("knn-queries", trainstep.DefaultKNNQueries, "images of --knn-test the kNN monitor classifies: a fixed sample")
	knnSeed := fs.Uint64("knn-seed", trainstep.DefaultKNNSeed, "seed of the kNN monitor's samples")
	knnFull := fs.Bool("knn-full", false, "the kNN monitor embeds every image of --knn-train and --knn-test (costly on a CPU)")
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
		kind, err := gpu.ParseKind(*backendName)
		if err != nil {
			return usagef("--backend: %v", err)
		}
		if *knnEvery > 0 && *knnData == "" {
			return usagef("--knn-every=%d needs --knn-train", *knnEvery)
		}
		if *knnBank < 1 || *knnQueries < 1 {
			return usagef("--knn-bank=%d and --knn-queries=%d: want at least 1 each (--knn-full for every image)", *knnBank, *knnQueries)
		}
		lossCfg, err := lossConfig()
		if err != nil {
			return err
		}
		var prec trainstep.Precision
		if *precision != "" {
			if prec, err = trainstep.ParsePrecision(*precision); err != nil {
				return usagef("--precision: %v", err)
			}
		}
		cfg := trainstep.StepConfig{
			Method: *method, MethodConfig: methodConfig(), Precision: prec,
			Model: trainstep.ModelConfig{Name: *model, BaseWidth: *width, ProjectionDim: *projDim, Channels: 3},
			Loss:  lossCfg,
			Optimizer: trainstep.OptimizerConfig{Kind: trainstep.OptimizerKind(*optimizer), Momentum: *momentum,
				WeightDecay: *wd, DecayAll: *decayAll},
			InitSeed: *initSeed,
		}
		if err := cfg.Validate(); err != nil {
			return usagef("%w", err)
		}
		run := trainstep.RunConfig{
			Data: *data, Out: *outDir, BatchSize: *batch, Epochs: *epochs, BaseLR: *lr, WarmupEpochs: *warmup,
			Seed: *seed, CheckpointEvery: *ckptEvery, KeepCheckpoints: *keep, MaxSteps: *maxSteps, MonitorEvery: *knnEvery,
		}
		if err := run.Validate(); err != nil {
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

		resumeFrom := resume.from
		if resume.latest {
			resumeFrom = *outDir
		}
		sum, err := trainstep.TrainOnShards(ctx, trainstep.ShardTraining{
			Step: cfg, Run: run, Backend: kind, Plugin: *plugin, Resume: resumeFrom,
			KNNData: *knnData, KNNTest: *knnTest, Log: log, Progress: display,
			KNN: trainstep.KNNMonitorOptions{Bank: *knnBank, Queries: *knnQueries, Seed: *knnSeed, Full: *knnFull},
		})
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
	line := fmt.Sprintf("train: %s after %d of %d steps (epoch %d): loss %.4g, mean q %.4g", state, sum.StepsDone, sum.TotalSteps, sum.Epoch, sum.Loss, sum.MeanQ)
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
