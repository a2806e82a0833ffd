// Package trainstep owns pretraining: the encoders and the projector, the contrastive losses,
// the training methods, SGD with momentum and LARS, the cosine learning-rate schedule, the
// training loop and its checkpoints. Each encoder, loss and method is one registration
// (models.go, losses.go, method.go), and ModelNames, LossNames and MethodNames list them. Models are written once in GoMLX and run on whichever
// backend package gpu chooses (gpu.New); nothing here needs cgo.
//
// # What other packages call
//
// Losses (`dcl loss`, `dcl npc`): LossGraph and StackedLossGraph build a loss inside any GoMLX
// graph; LossAndGrad and LossEvaluator evaluate one on float64 embeddings and return the loss,
// the per-anchor losses, the NPC multipliers q and the gradients with respect to the raw z1
// and z2.
//
// Encoders (`dcl embed`, inside Beam workers): LoadEncoder reads a checkpoint written by Train
// (a file, or a run's output folder for its newest checkpoint; local or gs://) and
// (*Encoder).Embed maps uint8 HWC images to backbone or projection features. ExportTorch and
// SaveTorch (`dcl export`) write the same weights for PyTorch: safetensors with torchvision's
// ResNet state-dict names and layouts, and a JSON sidecar (TorchInfo) for the input.
//
// Training (`dcl train`): OpenShards opens a shard directory as a BatchSource (MemorySource
// holds pairs in memory), CheckRun checks a run's settings against its data and checkpoint
// before a backend exists, and Train runs it. KNNMonitor is the kNN accuracy of the backbone
// on held-out labelled shards that Train can log every few epochs (knnmonitor.go says how it
// samples them). TrainOnShards is the whole of a run on shards as `dcl train` and `dcl
// reproduce` start it: shards opened, settings checked, monitor attached, backend chosen. NewStep, BenchStepConfig and RandomBatch build
// one training step on any backend, for benchmarks of the kernels under it; (*Step).Gradients
// reports the loss and gradient checksums of a step without taking it, to compare backends
// and precisions.
//
// # Adding a loss or a training method
//
// A loss is one LossSpec and one RegisterLoss call (losses.go): its name and aliases, its
// display name, the parameters it declares (Params: each a registry.Param with its name,
// default, doc and check, whose values reach the loss in LossConfig.Params), and the
// function that builds each
// anchor's loss from the terms every loss shares (AnchorTerms: the positive's logit and the
// log-sum of the negatives'). The same function serves the in-batch form (StackedLossGraph:
// 2N anchors), MoCo's queue form (QueueLossGraph) and NNCLR's pair form (PairLossGraph); a
// loss that needs the whole in-batch cosine matrix says InBatchOnly. ParseLossKind,
// LossConfig.Validate, the graph builders, `dcl loss`, the command line's flags and help,
// reproduce's keys, checks and report, and the checkpoint's JSON read the registry: a loss
// with a new parameter touches no other file (cmd/dcl's TestToyLossAndMethodAreOneRegistrationEach).
//
// A training method is one type implementing Method and one MethodSpec registered with
// RegisterMethod (method.go; method_moco.go and method_nnclr.go are examples): the settings
// it declares (Params, as a loss's; their values in MethodConfig), the variables it keeps between steps (created
// in CreateVariables, so checkpoints save them and resume restores them bit for bit), the
// loss of a batch (TrainGraph, which Gradients also evaluates) and what it does after each
// optimiser update (AfterUpdate). The loop, the checkpoints and resume do not change (a
// resumed run takes the settings it is not given from its checkpoint and refuses others);
// StepConfig.Method selects it ("simclr" by default).
//
// # Conventions
//
// Per-anchor values of the in-batch form come in 2N entries: the view-1 anchors of images
// 0..N-1, then the view-2 anchors. Images are uint8, height × width × channels (transforms.Image's layout), 1 or 3
// channels; they are scaled and normalised per dataset inside the model graph. Both views of a
// batch go through the in-batch method's encoder as one batch of 2N. Variables live in a GoMLX
// model.Store under "/model/backbone", "/model/projector", "/optimizer" and, for methods
// with state, their own scope; weight decay applies to variables
// named "weights" (convolution kernels and dense weights) only, unless configured otherwise.
// StepConfig.Precision selects the arithmetic (the Precision constants in step.go).
//
// Checkpoints are single safetensors files (checkpoint.go describes the layout): every
// variable as a tensor, and in the metadata a JSON header with the configuration and
// TrainState, and a SHA-256 that a reader checks.
package trainstep
