// Package verify holds the project's checks that one backend computes what another does, and
// their reports:
//
//   - the error model (errormodel.go): how far apart two correct implementations of an
//     encoder may embed the same image, derived from the checkpoint's layers and the
//     backends' arithmetic;
//   - the agreement check (`dcl agree`, agree.go): one checkpoint's embeddings on two
//     backends against that tolerance, and which kNN and linear-probe decisions a difference
//     that large could change (agreement.go);
//   - the one-command GPU check (`dcl gpu-check`, run by scripts/gpu-check.sh on a GPU
//     machine), described below.
//
// The GPU check proves the CUDA backend computes what the CPU backend computes, measures it,
// and says whether the data pipeline keeps it fed:
//
//   - agreement, in two rows: one resnet18-cifar training step's loss and gradients (trainstep
//     Step.Gradients) from the same initial weights and batch on a CPU reference and on the
//     backend under test, in float32 and in tf32, each within tolerances derived from the
//     step's own rounding, measured in the same run (tolerance.go);
//   - speed: images/s of the training step (both views of every pair count) at the batch
//     sizes DCL is about and at throughput sizes, in each precision (speedRows in run.go
//     lists the rows), median of synchronised steps after warm-up and pipelined throughput, with the peak memory of each (nvidia-smi
//     and the GPU allocator's own statistics);
//   - loop: `dcl train`'s loop on shards against the bare step;
//   - feeding: the shard reader's images/s on this machine's cores, on shards the check writes
//     from Fashion-MNIST (or random images), against the step's;
//   - beside PyTorch: scripts/torch_step.py builds the same model, loss and optimiser and
//     writes its own figures as JSON (eager, and torch.compile for the small batches), which
//     Check merges (CheckConfig.Torch) into one JSON and one Markdown table with the ratios;
//     docs.go renders the committed JSON's sections of docs/gpu.md and BENCHMARKS.md (make docs).
//
// Each measurement runs in a child process of its own (CheckConfig.Self re-executes the binary
// with PhaseEnv set): its GPU memory can be attributed to it, its XLA and cuBLAS state does
// not leak into the next, and one that crashes is reported without losing the others'
// results. The JSON is written after every part, so a run stopped by a time limit keeps what
// it measured.
package verify
