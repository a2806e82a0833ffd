#!/usr/bin/env bash
# cpu_compare.sh: dcl-beam's CPU kernels side by side with OpenBLAS and PyTorch on this machine
# (BENCHMARKS.md, "CPU against OpenBLAS and PyTorch").
#
# Usage: scripts/cpu_compare.sh [avx512|avx2] [threads, default "1 2"] [rounds, default 3]
#
# For each round and thread count it runs, one after another: dcl-beam's 1024³ GEMM, the
# resnet18-cifar training step at batch 64 pairs, and inference (resnet18-cifar at batch 128,
# resnet50 at batch 16), then scripts/cpu_reference.py's same measurements. Alternating the two
# sides keeps a shared machine's load changes from favouring either. "avx2" caps both sides at
# AVX2 on an AVX-512 machine: DCL_KERNEL=avx2 for dcl-beam, OPENBLAS_CORETYPE=Haswell,
# DNNL_MAX_CPU_ISA=AVX2 and ATEN_CPU_CAPABILITY=avx2 for the references. "avx512" names
# OpenBLAS's SkylakeX kernels explicitly, since OpenBLAS 0.3.21 takes AMD's AVX-512 CPUs for
# Haswell. Quote medians across rounds; the per-CPU-second figures are the ones to compare
# on a loaded machine.
#
# Needs Go, and /usr/bin/python3 with python3-torch, python3-torchvision, python3-numpy and
# libopenblas0-pthread (references, not dependencies).
set -euo pipefail
isa=${1:-avx512}
threads=${2:-"1 2"}
rounds=${3:-3}
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/kernels.test" ./gpu/kernels
go test -c -o "$bin/cpu.test" ./gpu/cpu
go test -c -o "$bin/trainstep.test" ./trainstep
case $isa in
avx2) ours=(env DCL_KERNEL=avx2) refs=(env OPENBLAS_CORETYPE=Haswell DNNL_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2) ;;
avx512) ours=(env) refs=(env OPENBLAS_CORETYPE=SkylakeX) ;;
*) echo "cpu_compare.sh: isa is avx512 or avx2, not $isa" >&2; exit 2 ;;
esac
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) isa=$isa threads=$threads"
for round in $(seq "$rounds"); do
  for t in $threads; do
    echo "## round $round, $t thread(s), load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd gpu/kernels && "${ours[@]}" "$bin/kernels.test" -test.run '^$' -test.bench "Sgemm/$isa.*/threads=$t/" -test.cpu "$t" -test.count 1 | grep '^Bench')
    (cd trainstep && "${ours[@]}" "$bin/trainstep.test" -test.run '^$' -test.bench 'StepResNet18$' -test.cpu "$t" -test.benchtime 3x -test.count 1 | grep '^Bench')
    (cd gpu/cpu && "${ours[@]}" "$bin/cpu.test" -test.run '^$' -test.bench 'ResNetInference' -test.cpu "$t" -test.benchtime 3x -test.count 1 | grep '^Bench')
    "${refs[@]}" /usr/bin/python3 scripts/cpu_reference.py --threads "$t" --steps 3
  done
done
