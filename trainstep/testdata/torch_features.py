# Loads an encoder written by `dcl export --projector` into PyTorch as the module file beside
# it says, and writes its features of the images, then their projections, in a raw file. Run
# by TestExportMatchesPyTorch.
# The weights are read by the reader below, written from the safetensors specification (an
# 8-byte little-endian header length, a JSON header, the raw data), not by the safetensors
# package (Debian has none) nor by the module file's own reader, which is checked against it.
# Usage: torch_features.py ENCODER.safetensors IMAGES.u8 N OUT.f32
import json, os, runpy, struct, sys
import numpy as np, torch

DTYPES = {"F32": np.float32, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        a = np.frombuffer(body[begin:end], dtype=np.dtype(DTYPES[e["dtype"]]).newbyteorder("<"))
        out[name] = torch.from_numpy(a.reshape(e["shape"]).copy())
    return out


path, images, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
info = json.load(open(path[: -len(".safetensors")] + ".json"))
module = runpy.run_path(os.path.join(os.path.dirname(path), info["module"]))
tensors = read_safetensors(path)
state = {k: v for k, v in tensors.items() if not k.startswith("projector.")}
proj_state = {k[len("projector.") :]: v for k, v in tensors.items() if k.startswith("projector.")}
for part, want in (("backbone", state), ("projector", proj_state)):
    theirs = module["load_state_dict"](path, part)
    assert theirs.keys() == want.keys(), (part, sorted(theirs.keys() ^ want.keys()))
    for k in want:
        assert torch.equal(theirs[k], want[k]), (part, k)
model = module["build"]()
model.load_state_dict(state, strict=True)
model.eval()
projector = module["build_projector"]()
projector.load_state_dict(proj_state, strict=True)
projector.eval()
h, w = info["input_size"]
pix = np.fromfile(images, dtype=np.uint8).reshape(n, h, w, info["channels"])
x = torch.from_numpy(pix).permute(0, 3, 1, 2).float() / 255
mean = torch.tensor(info["mean"], dtype=torch.float32).view(1, -1, 1, 1)
std = torch.tensor(info["std"], dtype=torch.float32).view(1, -1, 1, 1)
with torch.no_grad():
    feats = model((x - mean) / std)
    proj = projector(feats)
torch.cat([feats.flatten(), proj.flatten()]).numpy().astype("<f4").tofile(out)
