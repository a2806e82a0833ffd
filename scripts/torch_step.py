#!/usr/bin/env python3
"""PyTorch's side of `dcl gpu-check`: the same training step as trainstep builds, timed.

The model, loss and optimiser are those of trainstep.BenchStepConfig (trainstep/models.go,
loss.go, optimizer.go):

- resnet18-cifar: torchvision's resnet18 with conv1 a 3x3 stride-1 convolution, no max-pool,
  fc removed (512 features); resnet50: torchvision's resnet50 (v1.5), fc removed (2048);
- projector: Linear(f, f, no bias) -> BatchNorm1d -> ReLU -> Linear(f, 128);
- input: uint8 NHWC pairs on the host, both views as one batch of 2N, copied to the GPU each
  step, scaled to [0, 1] and normalised there (ImageNet's mean and std, what trainstep uses
  for unnamed RGB data);
- loss: DCL (tau 0.07) on L2-normalised projections, every one of the 2N views an anchor,
  negatives both views of every other image, mean over anchors; computed in float32;
- SGD momentum 0.9, weight decay 5e-4 on convolution and linear weights only (not on biases
  or batch norm), lr 0.03 * batch / 256.

Precisions, as dcl's --precision names them: float32 (TF32 off in matrix products and
convolutions: torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False),
tf32 (both on; cuDNN's convolutions default to it), and bf16 through torch.autocast (float32
master weights; TF32 on for what stays float32). channels_last memory format and
cudnn.benchmark, which help PyTorch on tensor cores. Every row runs eager; the --compile rows
run again with torch.compile (model and loss; the optimiser stays eager) while the compile
budget lasts. Throughput counts images: a batch of N pairs is 2N images; the figure is 2N over
the median of the timed steps after warm-up, each step synchronised.

Writes one JSON (the schema internal/gpucheck.TorchResult reads) to --out and stdout. Without
PyTorch or without a CUDA device it says so, writes a JSON with "error", and exits 2.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="torch-step.json", help="JSON file to write")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per row")
    p.add_argument("--steps", type=int, default=20, help="timed steps per row")
    p.add_argument("--device", default="cuda", help="cuda (the point) or cpu (to try the script)")
    p.add_argument("--quick", action="store_true", help="tiny batches, for trying the script")
    p.add_argument("--rows", default="", help="comma-separated model:size:batch:precision to run (default: dcl gpu-check's speed rows)")
    p.add_argument("--compile", default=None, help="comma-separated model:size:batch:precision to run again under torch.compile, in this order (default: resnet18-cifar at batch 32 and 64, tf32 and bf16; empty: none)")
    p.add_argument("--compile-budget", type=float, default=150, help="seconds of torch.compile rows at most; rows that would start later are skipped")
    return p.parse_args()


def fail(out, msg, code=2, **extra):
    res = {"torch": "", "rows": [], "error": msg, "command": " ".join(sys.argv)}
    res.update(extra)
    with open(out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))
    print("torch_step.py: " + msg, file=sys.stderr)
    sys.exit(code)


def default_rows(quick):
    """dcl gpu-check's speed rows (internal/gpucheck.speedRows)."""
    if quick:
        shapes = [("resnet18-cifar", 32, 4, ("float32", "tf32", "bf16")), ("resnet50", 64, 2, ("tf32", "bf16"))]
    else:
        shapes = [("resnet18-cifar", 32, 32, ("float32", "tf32", "bf16")), ("resnet18-cifar", 32, 64, ("tf32", "bf16")),
                  ("resnet18-cifar", 32, 256, ("float32", "tf32", "bf16")), ("resnet50", 224, 64, ("tf32", "bf16"))]
    return [(m, s, b, p) for (m, s, b, ps) in shapes for p in ps]


def default_compile_rows(quick):
    batch = (4,) if quick else (32, 64)
    return [("resnet18-cifar", 32, b, p) for b in batch for p in ("tf32", "bf16")]


def parse_rows(spec):
    rows = []
    for item in spec.split(","):
        if item.strip():
            m, s, b, p = item.strip().split(":")
            rows.append((m, int(s), int(b), p))
    return rows


def set_tf32(torch, precision):
    on = precision != "float32"
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def build(torch, nn, torchvision, model_name):
    if model_name == "resnet18-cifar":
        backbone = torchvision.models.resnet18()
        backbone.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        backbone.maxpool = nn.Identity()
        feat = 512
    elif model_name == "resnet50":
        backbone = torchvision.models.resnet50()
        feat = 2048
    else:
        raise ValueError("unknown model " + model_name)
    backbone.fc = nn.Identity()
    projector = nn.Sequential(nn.Linear(feat, feat, bias=False), nn.BatchNorm1d(feat), nn.ReLU(inplace=True), nn.Linear(feat, 128))
    return nn.Sequential(backbone, projector)


def dcl_loss(torch, F, z, tau=0.07):
    """trainstep's DCL: -s_ii/tau + log sum over negatives exp(s_ij/tau), mean over 2N anchors."""
    z = F.normalize(z.float(), dim=1)
    n2 = z.shape[0]
    n = n2 // 2
    logits = (z @ z.t()) / tau
    idx = torch.arange(n2, device=z.device)
    same_image = (idx[:, None] % n) == (idx[None, :] % n)
    pos = logits[idx, (idx + n) % n2]
    log_u = torch.logsumexp(logits.masked_fill(same_image, float("-inf")), dim=1)
    return (log_u - pos).mean()


def process_mib(pid):
    """nvidia-smi's memory figure for this process (context included), or 0."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0.0
    try:
        out = subprocess.run([smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except Exception:
        return 0.0
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0] == str(pid):
            try:
                return float(parts[1])
            except ValueError:
                return 0.0
    return 0.0


def run_row(torch, nn, F, torchvision, device, model_name, size, batch, precision, warmup, steps, compiled=False):
    cuda = device.type == "cuda"
    set_tf32(torch, precision)
    torch.manual_seed(1)
    model = build(torch, nn, torchvision, model_name).to(device)
    model = model.to(memory_format=torch.channels_last)
    forward, loss_fn = model, dcl_loss
    if compiled:
        forward, loss_fn = torch.compile(model), torch.compile(dcl_loss)
    decay, no_decay = [], []
    for mod in model.modules():
        for name, p in mod.named_parameters(recurse=False):
            (decay if name == "weight" and isinstance(mod, (nn.Conv2d, nn.Linear)) else no_decay).append(p)
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=0.03 * batch / 256, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    host = torch.randint(0, 256, (2 * batch, size, size, 3), dtype=torch.uint8, generator=g)
    if cuda:
        host = host.pin_memory()
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
    inv_std = 1 / torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)
    use_bf16 = precision == "bf16"

    def step():
        x = host.to(device, non_blocking=True)
        # NHWC uint8 -> NCHW view with channels_last strides: no copy of the layout.
        x = x.permute(0, 3, 1, 2).float().div_(255).sub_(mean).mul_(inv_std).contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
            z = forward(x)
        loss = loss_fn(torch, F, z)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model.train()
    first = time.perf_counter()
    for i in range(max(warmup, 1)):
        step()
        if i == 0:
            if cuda:
                torch.cuda.synchronize(device)
            first = time.perf_counter() - first
    if cuda:
        torch.cuda.synchronize(device)
    times = []
    loss = None
    for _ in range(max(steps, 1)):
        t = time.perf_counter()
        loss = step()
        if cuda:
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - t) * 1000)
    med = statistics.median(times)
    row = {
        "model": model_name, "size": size, "batch": batch, "precision": precision, "tf32": precision != "float32",
        "compiled": compiled, "first_step_seconds": first,
        "channels_last": True, "median_ms": med, "images_per_sec": 2 * batch / (med / 1000),
        "last_loss": float(loss.item()), "step_ms": times,
        "max_memory_allocated_mib": 0.0, "max_memory_reserved_mib": 0.0, "process_memory_mib": 0.0,
    }
    if cuda:
        row["max_memory_allocated_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        row["max_memory_reserved_mib"] = torch.cuda.max_memory_reserved(device) / 2**20
        row["process_memory_mib"] = process_mib(os.getpid())
    del model, opt
    return row


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        import torchvision
    except Exception as e:  # ImportError, or a broken installation
        fail(args.out, "PyTorch is not usable here (%s: %s): install torch and torchvision (pip install torch torchvision)" % (type(e).__name__, e))
    if args.device == "cuda" and not torch.cuda.is_available():
        fail(args.out, "PyTorch %s sees no CUDA device (torch.cuda.is_available() is False; built for CUDA %s): check nvidia-smi and the driver"
             % (torch.__version__, torch.version.cuda), torch=torch.__version__)
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    rows = parse_rows(args.rows) if args.rows else default_rows(args.quick)
    compile_rows = default_compile_rows(args.quick) if args.compile is None else parse_rows(args.compile)
    res = {
        "torch": torch.__version__, "torchvision": torchvision.__version__, "cuda": torch.version.cuda or "",
        "cudnn": str(torch.backends.cudnn.version() or ""), "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "command": " ".join([sys.executable] + sys.argv), "rows": [],
    }
    plan = [(r, False) for r in rows] + [(r, True) for r in compile_rows]
    compile_start = None
    for ((m, s, b, p), compiled) in plan:
        label = "%s %d px, batch %d, %s%s" % (m, s, b, p, ", torch.compile" if compiled else "")
        if compiled and not hasattr(torch, "compile"):
            res["rows"].append({"model": m, "size": s, "batch": b, "precision": p, "tf32": p != "float32", "compiled": True,
                                "error": "skipped: torch.compile needs PyTorch 2 (this is %s)" % torch.__version__})
            continue
        if compiled:
            compile_start = compile_start or time.perf_counter()
            if time.perf_counter() - compile_start > args.compile_budget:
                res["rows"].append({"model": m, "size": s, "batch": b, "precision": p, "tf32": p != "float32", "compiled": True,
                                    "error": "skipped: past the compile budget of %.0f s" % args.compile_budget})
                print("torch_step.py: skipped (compile budget): " + label, file=sys.stderr, flush=True)
                continue
        print("torch_step.py: " + label, file=sys.stderr, flush=True)
        try:
            row = run_row(torch, nn, F, torchvision, device, m, s, b, p, args.warmup, args.steps, compiled)
            print("torch_step.py: %.0f images/s (median %.1f ms, first step %.1f s), peak reserved %.0f MiB" % (row["images_per_sec"], row["median_ms"], row["first_step_seconds"], row["max_memory_reserved_mib"]), file=sys.stderr, flush=True)
        except Exception as e:  # one row failing (out of memory, say) must not lose the others
            row = {"model": m, "size": s, "batch": b, "precision": p, "tf32": p != "float32", "compiled": compiled, "error": "%s: %s" % (type(e).__name__, e)}
            print("torch_step.py: failed: " + row["error"], file=sys.stderr, flush=True)
        res["rows"].append(row)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))
    sys.exit(1 if any("error" in r and not r["error"].startswith("skipped") for r in res["rows"]) else 0)


if __name__ == "__main__":
    main()
