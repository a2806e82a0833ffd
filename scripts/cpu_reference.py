#!/usr/bin/env python3
"""The references for the CPU speed goals (BENCHMARKS.md, "CPU against PyTorch and OpenBLAS").

Measures, on this machine, what dcl-beam's CPU benchmarks are compared with:

- gemm: float32 1024x1024x1024 through numpy's BLAS (Debian's libopenblas0-pthread when it is
  installed: `numpy.show_config()` and the "blas" field say which), at each thread count;
- step: PyTorch's CPU training step of trainstep.BenchStepConfig (resnet18-cifar, projector,
  DCL loss at tau 0.07, SGD momentum 0.9 with weight decay), batch N pairs = 2N images, the same
  model and loss as scripts/torch_step.py builds;
- infer: PyTorch's CPU inference of the backbone (eval mode, no_grad), resnet18-cifar 32x32 at
  batch 128 and resnet50 224x224 at batch 16, the shapes of gpu/cpu's BenchmarkResNetInference.

Each figure is the median of the timed repetitions after warm-up, in wall time and in the
process's CPU time (which other processes' turns dilute less on a shared machine, as the Go
benchmarks' cpu- figures). Thread counts are set per
child process (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and torch.set_num_threads), so the BLAS and
OpenMP pools never hold more threads than asked. PyTorch and numpy are references, not
dependencies: install python3-torch, python3-torchvision, python3-numpy and
libopenblas0-pthread to run this.

Usage: /usr/bin/python3 scripts/cpu_reference.py [--threads 1,2] [--only gemm,step,infer]
       [--steps 5] [--batch 64] [--out cpu-reference.json]

The AVX2 path on an AVX-512 machine: OPENBLAS_CORETYPE=Haswell DNNL_MAX_CPU_ISA=AVX2
ATEN_CPU_CAPABILITY=avx2 (beside DCL_KERNEL=avx2 for dcl-beam's benchmarks).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--only", default="gemm,step,infer", help="which measurements")
    p.add_argument("--steps", type=int, default=5, help="timed training steps per row")
    p.add_argument("--batch", type=int, default=64, help="training batch in pairs (2N images)")
    p.add_argument("--out", default="", help="also write the JSON here")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    return p.parse_args()


def median_seconds(fn, warmup, reps):
    """Median wall seconds and median process CPU seconds of one call."""
    for _ in range(warmup):
        fn()
    walls, cpus = [], []
    for _ in range(reps):
        start, cpu0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu0)
    return statistics.median(walls), statistics.median(cpus)


def child_gemm(threads):
    import numpy as np

    n = 1024
    rng = np.random.default_rng(1)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    sec, cpu = median_seconds(lambda: np.matmul(a, b, out=c), 5, 21)
    blas = ""
    try:
        info = np.__config__.get_info("blas_opt_info")
        blas = ",".join(info.get("libraries", []))
    except Exception:
        pass
    lib = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    return {"what": "gemm", "threads": threads, "n": n, "gflops": 2 * n**3 / sec / 1e9,
            "cpu_gflops": 2 * n**3 / cpu / 1e9, "blas": blas or lib, "libblas": lib}


def build(torch, nn, torchvision, model_name, projector):
    if model_name == "resnet18-cifar":
        backbone = torchvision.models.resnet18()
        backbone.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        backbone.maxpool = nn.Identity()
        feat = 512
    else:
        backbone = torchvision.models.resnet50()
        feat = 2048
    backbone.fc = nn.Identity()
    if not projector:
        return backbone
    head = nn.Sequential(nn.Linear(feat, feat, bias=False), nn.BatchNorm1d(feat), nn.ReLU(inplace=True), nn.Linear(feat, 128))
    return nn.Sequential(backbone, head)


def dcl_loss(torch, F, z, tau=0.07):
    z = F.normalize(z, dim=1)
    n2 = z.shape[0]
    n = n2 // 2
    logits = (z @ z.t()) / tau
    idx = torch.arange(n2)
    same_image = (idx[:, None] % n) == (idx[None, :] % n)
    pos = logits[idx, (idx + n) % n2]
    log_u = torch.logsumexp(logits.masked_fill(same_image, float("-inf")), dim=1)
    return (log_u - pos).mean()


def child_step(threads, batch, steps):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision

    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = build(torch, nn, torchvision, "resnet18-cifar", True)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    rest = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": rest, "weight_decay": 0}],
                          lr=0.03 * batch / 256, momentum=0.9)
    x = torch.rand(2 * batch, 3, 32, 32)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = dcl_loss(torch, F, model(x))
        loss.backward()
        opt.step()

    sec, cpu = median_seconds(step, 2, steps)
    return {"what": "step", "threads": threads, "model": "resnet18-cifar", "batch_pairs": batch,
            "ms_per_image": sec * 1000 / (2 * batch), "cpu_ms_per_image": cpu * 1000 / (2 * batch),
            "torch": torch.__version__}


def child_infer(threads):
    import torch
    import torch.nn as nn
    import torchvision

    torch.set_num_threads(threads)
    rows = []
    for model_name, size, batch, reps in (("resnet18-cifar", 32, 128, 9), ("resnet50", 224, 16, 7)):
        torch.manual_seed(1)
        model = build(torch, nn, torchvision, model_name, False).eval()
        x = torch.rand(batch, 3, size, size)
        with torch.no_grad():
            sec, cpu = median_seconds(lambda: model(x), 2, reps)
        rows.append({"what": "infer", "threads": threads, "model": model_name, "size": size, "batch": batch,
                     "images_per_s": batch / sec, "images_per_cpu_s": batch / cpu, "torch": torch.__version__})
    return rows


def main():
    args = parse_args()
    if args.child:
        what, threads = args.child.split(":")
        threads = int(threads)
        if what == "gemm":
            res = child_gemm(threads)
        elif what == "step":
            res = child_step(threads, args.batch, args.steps)
        else:
            res = child_infer(threads)
        print(json.dumps(res))
        return
    rows = []
    for what in [w for w in args.only.split(",") if w]:
        for threads in [int(t) for t in args.threads.split(",") if t]:
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                       MKL_NUM_THREADS=str(threads))
            cmd = [sys.executable, __file__, "--child", f"{what}:{threads}", "--batch", str(args.batch),
                   "--steps", str(args.steps)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr, file=sys.stderr)
                sys.exit(f"cpu_reference.py: {what} at {threads} threads failed (exit {out.returncode})")
            res = json.loads(out.stdout.strip().splitlines()[-1])
            for r in res if isinstance(res, list) else [res]:
                print(json.dumps(r), flush=True)
                rows.append(r)
    doc = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(), "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
