# Evaluates lightly's contrastive losses and their gradients on the cases read from standard
# input, for TestLossMatchesLightly. Input: a JSON list of {"loss": "ntxent" | "dcl" | "dclw",
# "tau", "sigma", "dtype": "float32" | "float64", "z1", "z2"}; output: a JSON list of {"version",
# "loss", "grad1", "grad2"}, each value a number, or a string ("inf", "-inf", "nan") where it is
# not finite, which JSON cannot hold.
# Run by the lightly environment `make deps-lightly` installs (.cache/lightly).
import json, math, sys, warnings

import torch
import lightly
from lightly.loss import DCLLoss, DCLWLoss, NTXentLoss

# DCLWLoss's weight function copies a tensor with torch.tensor(), which warns on every call.
warnings.filterwarnings("ignore", message="To copy construct from a tensor")

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def number(v):
    return v if math.isfinite(v) else str(v)


def main():
    out = []
    for case in json.load(sys.stdin):
        if case["loss"] == "ntxent":
            fn = NTXentLoss(temperature=case["tau"])
        elif case["loss"] == "dcl":
            fn = DCLLoss(temperature=case["tau"])
        elif case["loss"] == "dclw":
            fn = DCLWLoss(temperature=case["tau"], sigma=case["sigma"])
        else:
            raise SystemExit("unknown loss %r" % case["loss"])
        dtype = DTYPES[case["dtype"]]
        z1 = torch.tensor(case["z1"], dtype=dtype, requires_grad=True)
        z2 = torch.tensor(case["z2"], dtype=dtype, requires_grad=True)
        loss = fn(z1, z2)
        g1, g2 = torch.autograd.grad(loss, (z1, z2))
        out.append({
            "version": lightly.__version__,
            "loss": number(loss.item()),
            "grad1": [[number(v) for v in row] for row in g1.tolist()],
            "grad2": [[number(v) for v in row] for row in g2.tolist()],
        })
    json.dump(out, sys.stdout)


main()
