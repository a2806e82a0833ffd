// Package gpucheck is the one-command GPU check of issue 11 (`dcl gpu-check`, run by
// scripts/gpu-check.sh on a GPU machine): it proves the CUDA backend computes what the CPU
// backend computes, measures it, and says whether the data pipeline keeps it fed.
//
//   - agreement: one resnet18-cifar training step's loss and gradients (trainstep
//     Step.Gradients) from the same initial weights and batch on the CPU backend and on the
//     backend under test, in float32 with TF32 off, compared within stated tolerances;
//   - speed: images/s of the training step (both views of every pair count) for
//     resnet18-cifar at 32 px, batch 256 pairs, and resnet50 at 224 px, batch 64 pairs, in
//     float32 (TF32 allowed, as PyTorch's allow_tf32) and bf16 mixed precision, median of
//     timed steps after warm-up, with the peak memory of each;
//   - feeding: the shard reader's images/s on this machine's cores, on shards the check writes
//     from Fashion-MNIST (or random images), against the step's;
//   - beside PyTorch: scripts/torch_step.py builds the same model, loss and optimiser and
//     writes its own figures as JSON, which Run merges (Config.Torch) into one JSON and one
//     Markdown table with the ratios.
//
// Each measurement runs in a child process of its own (Config.Self re-executes the binary
// with PhaseEnv set): its GPU memory can be attributed to it, its XLA and cuBLAS state does
// not leak into the next, the agreement child gets NVIDIA_TF32_OVERRIDE=0 before any CUDA
// library starts, and one that crashes is reported without losing the others' results.
package gpucheck
