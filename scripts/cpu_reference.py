#!/usr/bin/env python3
"""The references for the CPU speed goals (BENCHMARKS.md, "CPU against PyTorch and OpenBLAS").

Measures, on this machine, what dcl-beam's CPU benchmarks are compared with; scripts/cpu_compare.py
runs it beside our benchmarks, round after round, and writes the table.

- gemm: float32 1024x1024x1024 through numpy's BLAS (run it with Debian's /usr/bin/python3 and
  libopenblas0-pthread: `make deps-bench` installs it; the "blas" field says which library ran);
- step: PyTorch's CPU training step of trainstep.BenchStepConfig for one model, image size and
  batch of N pairs (2N images): the model below, the projector, DCL at tau 0.07 on the
  L2-normalised projections, SGD momentum 0.9 with weight decay 5e-4 on convolution and linear
  weights; uint8 NHWC pixels scaled and normalised in the step, as trainstep's graph does;
- infer: PyTorch's CPU inference of the backbone (eval mode, no_grad) at one size and batch.

Each step and inference row runs eager and then, unless --no-compile, under torch.compile
(inductor's C++ back end; the model and the loss compiled, the optimiser eager), each on a
fresh model. The figure is the median of the timed repetitions after warm-up (the compile
happens in the warm-up), in wall time and in the process's CPU time. Thread counts are set per
child process (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and torch.set_num_threads).

The models are written out here, not taken from torchvision, so that the PyTorch under test needs
no torchvision built for it: resnet18-cifar is torchvision's resnet18 with a 3x3 stride-1 conv1
and no max-pool, resnet50 torchvision's resnet50 (v1.5: the stride on the 3x3 convolution),
small-cnn trainstep's four conv-BN-ReLU layers (widths 32, 64, 128, 128; strides 1, 2, 2, 1);
every backbone ends in a global average pool and has no fc. `--check-torchvision` compares
the two ResNets with torchvision's (parameter names and shapes, and outputs on the same
weights) where torchvision is installed.

Usage: PYTHON scripts/cpu_reference.py --child step --model resnet18-cifar --size 32 --batch 64
       PYTHON scripts/cpu_reference.py --child infer --model resnet50 --size 224 --batch 16
       PYTHON scripts/cpu_reference.py --child gemm
       [--threads 2] [--steps 5] [--warmup 2] [--no-compile] [--channels-last]
Each child prints one JSON object per line.
"""

import argparse
import json
import os
import statistics
import sys
import time

MEAN = {3: (0.485, 0.456, 0.406), 1: (0.5,)}
STD = {3: (0.229, 0.224, 0.225), 1: (0.5,)}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", required=True, choices=("gemm", "step", "infer", "profile", "check-torchvision"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", default="resnet18-cifar")
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--batch", type=int, default=64, help="step: pairs (2N images); infer: images")
    p.add_argument("--steps", type=int, default=5, help="timed repetitions")
    p.add_argument("--warmup", type=int, default=2, help="untimed repetitions (the compile is in the first)")
    p.add_argument("--no-compile", action="store_true", help="eager only")
    p.add_argument("--channels-last", action="store_true", help="NHWC tensors for the convolutions")
    return p.parse_args()


def median_seconds(fn, warmup, reps):
    """Median wall and process CPU seconds of one call, and the first call's wall seconds."""
    first = time.perf_counter()
    for i in range(max(warmup, 1)):
        fn()
        if i == 0:
            first = time.perf_counter() - first
    walls, cpus = [], []
    for _ in range(reps):
        start, cpu0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu0)
    return statistics.median(walls), statistics.median(cpus), first


def child_gemm(args):
    import numpy as np

    n = 1024
    rng = np.random.default_rng(1)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    sec, cpu, _ = median_seconds(lambda: np.matmul(a, b, out=c), 5, 21)
    lib = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    blas = lib
    try:
        from threadpoolctl import threadpool_info

        blas = ",".join("%s %s %s" % (i.get("internal_api"), i.get("version"), i.get("architecture")) for i in threadpool_info())
    except Exception:
        pass
    return [{"what": "gemm", "threads": args.threads, "n": n, "gflops": 2 * n**3 / sec / 1e9,
             "cpu_gflops": 2 * n**3 / cpu / 1e9, "blas": blas, "numpy": np.__version__}]


def models(torch, nn):
    """The backbones, as functions of nothing, and their feature widths."""

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inp, planes, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = None
            if stride != 1 or inp != planes:
                self.downsample = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(y)) + idt)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inp, planes, stride):
            super().__init__()
            out = planes * 4
            self.conv1 = nn.Conv2d(inp, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or inp != out:
                self.downsample = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + idt)

    class ResNet(nn.Module):
        def __init__(self, block, layers, cifar):
            super().__init__()
            if cifar:
                self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
                self.maxpool = nn.Identity()
            else:
                self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
                self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            inp = 64
            for i, blocks in enumerate(layers):
                planes = 64 << i
                mods = []
                for b in range(blocks):
                    mods.append(block(inp, planes, 2 if b == 0 and i > 0 else 1))
                    inp = planes * block.expansion
                setattr(self, "layer%d" % (i + 1), nn.Sequential(*mods))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Identity()
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    def small_cnn():
        layers, inp = [], 1
        for out, stride in ((32, 1), (64, 2), (128, 2), (128, 1)):
            layers += [nn.Conv2d(inp, out, 3, stride, 1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            inp = out
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())

    return {
        "resnet18-cifar": (lambda: ResNet(BasicBlock, (2, 2, 2, 2), True), 512, 3),
        "resnet50": (lambda: ResNet(Bottleneck, (3, 4, 6, 3), False), 2048, 3),
        "small-cnn": (small_cnn, 128, 1),
    }


def build(torch, nn, name, projector):
    make, feat, channels = models(torch, nn)[name]
    backbone = make()
    if not projector:
        return backbone, channels
    head = nn.Sequential(nn.Linear(feat, feat, bias=False), nn.BatchNorm1d(feat), nn.ReLU(inplace=True), nn.Linear(feat, 128))
    return nn.Sequential(backbone, head), channels


def dcl_loss(torch, F, z, tau=0.07):
    """trainstep's DCL: -s_ii/tau + log sum over negatives exp(s_ij/tau), mean over 2N anchors."""
    z = F.normalize(z, dim=1)
    n2 = z.shape[0]
    n = n2 // 2
    logits = (z @ z.t()) / tau
    idx = torch.arange(n2, device=z.device)
    same_image = (idx[:, None] % n) == (idx[None, :] % n)
    pos = logits[idx, (idx + n) % n2]
    log_u = torch.logsumexp(logits.masked_fill(same_image, float("-inf")), dim=1)
    return (log_u - pos).mean()


def versions(torch):
    v = {"torch": torch.__version__, "cpu_capability": ""}
    try:
        v["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception:
        pass
    return v


def child_step(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    rows = []
    for compiled in (False,) if args.no_compile else (False, True):
        torch.manual_seed(1)
        model, channels = build(torch, nn, args.model, True)
        fmt = torch.channels_last if args.channels_last else torch.contiguous_format
        model = model.to(memory_format=fmt).train()
        decay, no_decay = [], []
        for mod in model.modules():
            for name, p in mod.named_parameters(recurse=False):
                (decay if name == "weight" and isinstance(mod, (nn.Conv2d, nn.Linear)) else no_decay).append(p)
        opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
                              lr=0.03 * args.batch / 256, momentum=0.9)
        forward, loss_fn = model, dcl_loss
        if compiled:
            forward, loss_fn = torch.compile(model), torch.compile(dcl_loss)
        g = torch.Generator().manual_seed(1)
        pixels = torch.randint(0, 256, (2 * args.batch, args.size, args.size, channels), dtype=torch.uint8, generator=g)
        mean = torch.tensor(MEAN[channels]).view(1, channels, 1, 1)
        inv_std = 1 / torch.tensor(STD[channels]).view(1, channels, 1, 1)

        def step():
            x = pixels.permute(0, 3, 1, 2).float().div_(255).sub_(mean).mul_(inv_std).contiguous(memory_format=fmt)
            loss = loss_fn(torch, F, forward(x))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        sec, cpu, first = median_seconds(step, args.warmup, args.steps)
        images = 2 * args.batch
        rows.append(dict(versions(torch), what="step", model=args.model, size=args.size, batch_pairs=args.batch,
                         threads=args.threads, compiled=compiled, channels_last=args.channels_last,
                         ms_per_image=sec * 1000 / images, cpu_ms_per_image=cpu * 1000 / images, first_s=first))
    return rows


def child_infer(args):
    import torch
    import torch.nn as nn

    torch.set_num_threads(args.threads)
    rows = []
    for compiled in (False,) if args.no_compile else (False, True):
        torch.manual_seed(1)
        model, channels = build(torch, nn, args.model, False)
        fmt = torch.channels_last if args.channels_last else torch.contiguous_format
        model = model.to(memory_format=fmt).eval()
        forward = torch.compile(model) if compiled else model
        x = torch.rand(args.batch, channels, args.size, args.size).contiguous(memory_format=fmt)

        def run():
            with torch.no_grad():
                forward(x)

        sec, cpu, first = median_seconds(run, args.warmup, args.steps)
        rows.append(dict(versions(torch), what="infer", model=args.model, size=args.size, batch=args.batch,
                         threads=args.threads, compiled=compiled, channels_last=args.channels_last,
                         images_per_s=args.batch / sec, images_per_cpu_s=args.batch / cpu, first_s=first))
    return rows


def child_profile(args):
    """Where PyTorch's eager step spends its time: self CPU time per part of the step (forward,
    loss, backward, optimiser) and per kind of operation (convolution, batch norm, other)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model, channels = build(torch, nn, args.model, True)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.rand(2 * args.batch, channels, args.size, args.size).contiguous(memory_format=fmt)

    def step():
        with record_function("part:forward"):
            z = model(x)
        with record_function("part:loss"):
            loss = dcl_loss(torch, F, z)
        opt.zero_grad(set_to_none=True)
        with record_function("part:backward"):
            loss.backward()
        with record_function("part:optimizer"):
            opt.step()

    for _ in range(max(args.warmup, 1)):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    totals = {}
    for e in prof.events():
        part, p = "other", e
        while p is not None:
            if p.name.startswith("part:"):
                part = p.name[5:]
                break
            p = p.cpu_parent
        name = e.name.lower()
        kind = "convolution" if "conv" in name else "batch norm" if "batch_norm" in name else "other"
        if e.name.startswith("part:"):
            kind = "other"
        key = part + "/" + kind
        totals[key] = totals.get(key, 0.0) + e.self_cpu_time_total / 1000 / args.steps
    images = 2 * args.batch
    return [dict(versions(torch), what="profile", model=args.model, size=args.size, batch_pairs=args.batch, threads=args.threads,
                 cpu_ms_per_step={k: round(v, 2) for k, v in sorted(totals.items())},
                 cpu_ms_per_image=round(sum(totals.values()) / images, 3))]


def child_check_torchvision(args):
    """Our ResNets against torchvision's: the same parameters and, on the same weights, outputs."""
    import torch
    import torch.nn as nn
    import torchvision

    rows = []
    for name, size in (("resnet18-cifar", 32), ("resnet50", 64)):
        ours, _ = build(torch, nn, name, False)
        if name == "resnet18-cifar":
            ref = torchvision.models.resnet18()
            ref.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
            ref.maxpool = nn.Identity()
        else:
            ref = torchvision.models.resnet50()
        ref.fc = nn.Identity()
        a = {k: v.shape for k, v in ours.state_dict().items()}
        b = {k: v.shape for k, v in ref.state_dict().items()}
        if a != b:
            raise SystemExit("%s: parameters differ from torchvision's: %s" % (name, sorted(set(a.items()) ^ set(b.items()))[:5]))
        ref.load_state_dict(ours.state_dict())
        x = torch.rand(2, 3, size, size)
        diff = (ours.eval()(x) - ref.eval()(x)).abs().max().item()
        if diff > 1e-5:
            raise SystemExit("%s: outputs differ from torchvision's by %g" % (name, diff))
        rows.append({"what": "check-torchvision", "model": name, "max_abs_diff": diff, "torchvision": torchvision.__version__})
    return rows


def main():
    args = parse_args()
    rows = {"gemm": child_gemm, "step": child_step, "infer": child_infer, "profile": child_profile, "check-torchvision": child_check_torchvision}[args.child](args)
    for r in rows:
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
