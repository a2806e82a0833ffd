# Loads an encoder written by `dcl export` into torchvision's ResNet, as the README says, and
# writes its features of the images in a raw file. Run by TestExportMatchesPyTorch.
# Usage: torch_features.py ENCODER.safetensors IMAGES.u8 N OUT.f32
import json, sys
import numpy as np, torch, torch.nn as nn, torchvision, safetensors.torch

path, images, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
info = json.load(open(path[: -len(".safetensors")] + ".json"))
model = getattr(torchvision.models, info["torchvision_model"])()
if info["model"].endswith("-cifar"):
    model.conv1 = nn.Conv2d(info["channels"], info["base_width"], 3, 1, 1, bias=False)
    model.maxpool = nn.Identity()
model.fc = nn.Identity()
model.load_state_dict(safetensors.torch.load_file(path), strict=True)
model.eval()
h, w = info["input_size"]
pix = np.fromfile(images, dtype=np.uint8).reshape(n, h, w, info["channels"])
x = torch.from_numpy(pix).permute(0, 3, 1, 2).float() / 255
mean = torch.tensor(info["mean"], dtype=torch.float32).view(1, -1, 1, 1)
std = torch.tensor(info["std"], dtype=torch.float32).view(1, -1, 1, 1)
with torch.no_grad():
    feats = model((x - mean) / std)
feats.numpy().astype("<f4").tofile(out)
