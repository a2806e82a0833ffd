package trainstep

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// The settings of a training run, by name: each is a configuration key (reproduce's
// train.defaults and runs), and its flag of `dcl train` is the name with '-' for '_'.
const (
	SettingMethod          = "method"
	SettingLoss            = "loss"
	SettingModel           = "model"
	SettingWidth           = "width"
	SettingProjectionDim   = "projection_dim"
	SettingBatchSize       = "batch_size"
	SettingEpochs          = "epochs"
	SettingTemperature     = "temperature"
	SettingLR              = "lr"
	SettingMomentum        = "momentum"
	SettingWeightDecay     = "weight_decay"
	SettingDecayAll        = "decay_all"
	SettingWarmupEpochs    = "warmup_epochs"
	SettingOptimizer       = "optimizer"
	SettingBackend         = "backend"
	SettingPrecision       = "precision"
	SettingSeed            = "seed"
	SettingCheckpointEvery = "checkpoint_every"
	SettingNormalization   = "normalization"
	SettingInitSeed        = "init_seed"
	SettingKeepCheckpoints = "keep_checkpoints"
	SettingMaxSteps        = "max_steps"
	SettingReduction       = "reduction"
	SettingDCLWGrad        = "dclw_grad"
	SettingDevices         = "devices"
	SettingBNScope         = "bn_scope"
)

// Setting is one setting of a training run, declared once: its parameter (the configuration
// key, the flag, the help, the default, and whether a configuration may give it) and the
// field of the training that holds its value. `dcl train`'s flags, reproduce's run keys and
// their JSON are derived from the parameter; checkpoints store the step's and the run's
// configuration, so a setting held there is stored under its field's JSON key.
type Setting struct {
	registry.Param
	// Field is a pointer to the field of t that holds the value.
	Field func(t *ShardTraining) any
}

// TrainSettings are the settings of a training run, in the order a run's JSON has always
// listed them (the losses' and methods' parameters go after temperature: RunParams). Adding
// a setting is one entry here, on a field that the step or the run reads.
func TrainSettings() []Setting {
	paper := PaperDefaults()
	def := registry.Param{ZeroIsDefault: true}
	with := func(p registry.Param, field func(t *ShardTraining) any) Setting {
		return Setting{Param: p, Field: field}
	}
	number := func(name string, typ registry.Type, v float64, doc string) registry.Param {
		p := def
		p.Name, p.Type, p.Default, p.Doc = name, typ, v, doc
		return p
	}
	value := func(name string, v registry.Value, doc string) registry.Param {
		p := def
		p.Name, p.Value, p.Doc = name, v, doc
		return p
	}
	commandOnly := func(p registry.Param) registry.Param {
		p.Surface, p.ZeroIsDefault = registry.CommandOnly, false
		return p
	}
	zeroIsValue := func(p registry.Param) registry.Param {
		p.ZeroIsDefault = false
		return p
	}
	return []Setting{
		with(value(SettingMethod, registry.Word(SimCLRMethod, nil), "training method: "+strings.Join(MethodNames(), ", ")),
			func(t *ShardTraining) any { return &t.Step.Method }),
		with(value(SettingLoss, registry.Word(paper.Loss, ParseLossKind), "loss: "+strings.Join(LossNames(), ", ")),
			func(t *ShardTraining) any { return &t.Step.Loss.Kind }),
		with(value(SettingModel, registry.Word(ResNet18CIFAR, nil), "encoder: "+strings.Join(ModelNames(), ", ")),
			func(t *ShardTraining) any { return &t.Step.Model.Name }),
		with(number(SettingWidth, registry.Int, 0, "base channel width of the encoder (0: the model's default, 64 for the ResNets, 32 for small-cnn)"),
			func(t *ShardTraining) any { return &t.Step.Model.BaseWidth }),
		with(number(SettingProjectionDim, registry.Int, DefaultProjectionDim, "projector output dimension"),
			func(t *ShardTraining) any { return &t.Step.Model.ProjectionDim }),
		with(number(SettingBatchSize, registry.Int, float64(paper.BatchSize), "view pairs per step (2× as many images through the network)"),
			func(t *ShardTraining) any { return &t.Run.BatchSize }),
		with(number(SettingEpochs, registry.Int, float64(paper.Epochs), "epochs; epoch e reads the shards' augmented pass e mod E"),
			func(t *ShardTraining) any { return &t.Run.Epochs }),
		with(number(SettingTemperature, registry.Float, paper.Temperature, "temperature τ (paper: 0.07 for CIFAR and STL-10, 0.1 for ImageNet)"),
			func(t *ShardTraining) any { return &t.Step.Loss.Temperature }),
		with(number(SettingLR, registry.Float, paper.BaseLR, "base learning rate per 256 view pairs: the peak is lr·batch/256"),
			func(t *ShardTraining) any { return &t.Run.BaseLR }),
		with(zeroIsValue(number(SettingMomentum, registry.Float, paper.Momentum, "SGD momentum")),
			func(t *ShardTraining) any { return &t.Step.Optimizer.Momentum }),
		with(zeroIsValue(number(SettingWeightDecay, registry.Float, paper.WeightDecay, "weight decay (convolution and dense weights only, unless --decay-all)")),
			func(t *ShardTraining) any { return &t.Step.Optimizer.WeightDecay }),
		with(number(SettingDecayAll, registry.Bool, 0, "apply weight decay (and LARS scaling) to biases and batch-norm parameters too"),
			func(t *ShardTraining) any { return &t.Step.Optimizer.DecayAll }),
		with(number(SettingWarmupEpochs, registry.Float, 0, "linear learning-rate warm-up, in epochs (may be fractional); cosine annealing after"),
			func(t *ShardTraining) any { return &t.Run.WarmupEpochs }),
		with(value(SettingOptimizer, registry.Word(paper.Optimizer, nil), "sgd (with momentum) or lars (for large batches)"),
			func(t *ShardTraining) any { return &t.Step.Optimizer.Kind }),
		with(value(SettingBackend, registry.Word(gpu.Auto, gpu.ParseKind), "compute backend: "+gpu.BackendsHelp),
			func(t *ShardTraining) any { return &t.Backend }),
		with(value(SettingPrecision, registry.Word(Precision(""), parsePrecisionOrEmpty),
			"arithmetic: float32 (full float32 everywhere, the paper's V100 arithmetic), tf32 (float32 with\n"+
				"convolutions and matrix products on TF32 tensor cores: PyTorch's default for cuDNN convolutions;\n"+
				"full float32 on the CPU), or bf16 (mixed precision, float32 master weights; for GPUs);\n"+
				"empty: float32, or the checkpoint's when resuming"),
			func(t *ShardTraining) any { return &t.Step.Precision }),
		with(value(SettingSeed, registry.Uint(1), "seed of the data order (and of the initial weights unless --init-seed)"),
			func(t *ShardTraining) any { return &t.Run.Seed }),
		with(number(SettingCheckpointEvery, registry.Int, float64(paper.CheckpointEvery), "write a checkpoint every N steps (0: only at the end and when interrupted)"),
			func(t *ShardTraining) any { return &t.Run.CheckpointEvery }),
		with(value(SettingNormalization, registry.Text(""), "registered dataset whose per-channel mean and std normalise the encoder's input (empty: the training data's own)"),
			func(t *ShardTraining) any { return &t.Step.Model.Dataset }),
		with(value(SettingDevices, registry.Of(1, "string", ParseDevices, FormatDevices),
			"devices of the backend that train data parallel, the batch split evenly over them (a number, or all):\n"+
				"every step computes what it computes on one device, and checkpoints resume on any number"),
			func(t *ShardTraining) any { return &t.Run.Devices }),
		with(value(SettingBNScope, registry.Word(BNGlobal, ParseBNScope),
			"batch-norm statistics on several devices: global (over the whole batch, as on one device: SyncBN)\n"+
				"or device (over each device's share, as DDP without SyncBN; the result then depends on --devices)"),
			func(t *ShardTraining) any { return &t.Step.BNScope }),
		with(commandOnly(value(SettingInitSeed, registry.Uint(0), "seed of the initial weights (0: --seed; when resuming, the checkpoint's)")),
			func(t *ShardTraining) any { return &t.Step.InitSeed }),
		with(commandOnly(number(SettingKeepCheckpoints, registry.Int, 3, "checkpoints to keep, newest first (0: all)")),
			func(t *ShardTraining) any { return &t.Run.KeepCheckpoints }),
		with(commandOnly(number(SettingMaxSteps, registry.Int, 0, "stop (with a checkpoint) after this many steps in total; --resume continues")),
			func(t *ShardTraining) any { return &t.Run.MaxSteps }),
		with(commandOnly(value(SettingReduction, registry.Word(Mean, nil), "mean (over the 2N anchors) or sum (the paper's Σ)")),
			func(t *ShardTraining) any { return &t.Step.Loss.Reduction }),
		with(zeroIsValue(number(SettingDCLWGrad, registry.Bool, 1, "let the gradient flow through DCLW's weights, as the paper's formula and lightly's DCLWLoss do; false: constants in the backward pass")),
			func(t *ShardTraining) any { return &t.Step.Loss.WeightGrad }),
	}
}

// parsePrecisionOrEmpty is ParsePrecision, but the empty text stays empty: a run that
// names no precision takes the checkpoint's when it resumes.
func parsePrecisionOrEmpty(s string) (Precision, error) {
	if strings.TrimSpace(s) == "" {
		return "", nil
	}
	return ParsePrecision(s)
}

// LossSettings are the settings of TrainSettings that configure the loss (`dcl loss` takes
// them, with the losses' parameters).
func LossSettings() []Setting {
	var t ShardTraining
	return slices.DeleteFunc(TrainSettings(), func(s Setting) bool { return !within(s.Field(&t), &t.Step.Loss) })
}

// within reports whether the field ptr points at lies inside the struct *outer.
func within[T any](ptr any, outer *T) bool {
	p := reflect.ValueOf(ptr).Pointer()
	start := reflect.ValueOf(outer).Pointer()
	return p >= start && p < start+reflect.TypeFor[T]().Size()
}

// SettingParams are the parameters of settings.
func SettingParams(settings []Setting) []registry.Param {
	out := make([]registry.Param, len(settings))
	for i, s := range settings {
		out[i] = s.Param
	}
	return out
}

// RunParams are every parameter a run's configuration may give: the settings a
// configuration takes, with the parameters of every registered loss and method after
// temperature, in the order a run's JSON lists them.
func RunParams() []registry.Param {
	var head, tail []registry.Param
	for _, s := range TrainSettings() {
		if s.Surface == registry.CommandOnly {
			continue
		}
		if len(tail) > 0 || slices.ContainsFunc(head, func(p registry.Param) bool { return p.Name == SettingTemperature }) {
			tail = append(tail, s.Param)
		} else {
			head = append(head, s.Param)
		}
	}
	return registry.Merge([]registry.Variant{
		{Name: "training", Params: head},
		{Name: "losses", Params: LossParams()},
		{Name: "methods", Params: MethodParams()},
		{Name: "training", Params: tail},
	})
}

// ApplySettings sets the fields of t that the settings hold: each to the value given (by
// name, as the registry holds it: numbers as float64, a Value's own), else to its declared
// default; and the given parameters of the losses and methods to the loss's and the method's
// configuration (one left out there takes its loss's or method's default). A name that is
// neither is an error. This is the one place where a setting becomes the step's or the
// run's configuration.
func ApplySettings(t *ShardTraining, given map[string]any) error {
	settings := TrainSettings()
	for _, s := range settings {
		v, ok := given[s.Name]
		if !ok {
			v = s.DefaultValue()
		}
		if err := s.set(t, v); err != nil {
			return err
		}
	}
	loss, method := LossParams(), MethodParams()
	for _, name := range slices.Sorted(maps.Keys(given)) {
		if slices.ContainsFunc(settings, func(s Setting) bool { return s.Name == name }) {
			continue
		}
		_, isLoss := registry.Lookup(loss, name)
		_, isMethod := registry.Lookup(method, name)
		if !isLoss && !isMethod {
			return fmt.Errorf("no training setting %s", name)
		}
		v, err := asFloat(given[name])
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if isLoss {
			if t.Step.Loss.Params == nil {
				t.Step.Loss.Params = registry.Values{}
			}
			t.Step.Loss.Params[name] = v
		}
		if isMethod {
			if t.Step.MethodConfig == nil {
				t.Step.MethodConfig = MethodConfig{}
			}
			t.Step.MethodConfig[name] = v
		}
	}
	return nil
}

// set puts v into the setting's field of t, converting it to the field's type.
func (s Setting) set(t *ShardTraining, v any) error {
	dst := reflect.ValueOf(s.Field(t)).Elem()
	if dst.Kind() == reflect.Bool {
		f, err := asFloat(v)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		dst.SetBool(f != 0)
		return nil
	}
	src := reflect.ValueOf(v)
	if !src.IsValid() || !src.CanConvert(dst.Type()) {
		return fmt.Errorf("%s: a %T cannot be a %s", s.Name, v, dst.Type())
	}
	dst.Set(src.Convert(dst.Type()))
	return nil
}

// Get is the setting's value in t.
func (s Setting) Get(t *ShardTraining) any { return reflect.ValueOf(s.Field(t)).Elem().Interface() }

// asFloat is a number's value as Values hold it.
func asFloat(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	}
	r := reflect.ValueOf(v)
	if r.IsValid() && r.CanConvert(reflect.TypeFor[float64]()) && r.Kind() != reflect.String {
		return r.Convert(reflect.TypeFor[float64]()).Float(), nil
	}
	return 0, fmt.Errorf("%v is not a number", v)
}

// SettingPack is how many runs of a reproduction may train together in one compiled step
// (PackedStep): a setting of the reproduction, not of one run, since it changes no run's
// result.
const SettingPack = "pack"

// Pack is the pack setting: PackAuto, PackOff, or at most that many runs per pack.
type Pack int

const (
	// PackAuto packs up to PackAutoMax runs that share a step, as many as the device's memory
	// holds.
	PackAuto Pack = 0
	// PackOff trains every run alone.
	PackOff Pack = 1
	// PackAutoMax is the most runs PackAuto puts in one pack: past it one launch already
	// keeps an accelerator busy at the small batches packing is for, and a pack's first
	// compilation grows with its runs.
	PackAutoMax = 8
)

// ParsePack reads "auto", "off" or a number of runs of 1 or more (1 is off).
func ParsePack(s string) (Pack, error) {
	switch t := strings.ToLower(strings.TrimSpace(s)); t {
	case "auto", "":
		return PackAuto, nil
	case "off", "false", "no":
		return PackOff, nil
	default:
		n, err := strconv.Atoi(t)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%q: want auto, off, or the most runs per pack (1 or more)", s)
		}
		return Pack(n), nil
	}
}

// String writes the setting as ParsePack reads it.
func (p Pack) String() string {
	switch p {
	case PackAuto:
		return "auto"
	case PackOff:
		return "off"
	}
	return strconv.Itoa(int(p))
}

// PackSetting declares the pack setting: a reproduction config's train.pack key and
// `dcl reproduce --pack`.
func PackSetting() registry.Param {
	return registry.Param{Name: SettingPack, Value: registry.Of(PackAuto, "string", ParsePack, Pack.String),
		Doc: "runs that share a compiled step (model, batch size, method, precision, backend, epochs) train together, " +
			"each step of all in one launch: auto (up to " + strconv.Itoa(PackAutoMax) + " runs a pack, as many as fit the device's memory), " +
			"off (every run alone), or the most runs a pack holds"}
}
