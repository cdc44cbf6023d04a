#!/usr/bin/python3
"""Checkpoints written by sophon-train --save load into torchvision's models in Python.

Trains a fused array of two resnet18 and one ordinary resnet50 for one synthetic batch with
--save, then loads each file with torch.jit.load and its state dict (less Sophon's own
sophon_arch / sophon_num_classes entries) into torchvision.models.<arch>(num_classes=10) with
strict=True: every parameter and buffer must be there under torchvision's name and shape.

Usage: checkpoint_torchvision_test.py SOPHON_TRAIN TEMP_DIR. Exits 77 (skipped) when
python3-torchvision is not installed.
"""
import os
import subprocess
import sys

try:
    import torch
    import torchvision
except ImportError as e:
    print("skipped: %s (install python3-torchvision)" % e)
    sys.exit(77)


def save(train, arch, path, fused):
    command = [train, "--synthetic-data", "--arch=" + arch, "--crop-size=32", "--batch-size=4",
               "--synthetic-samples=4", "--synthetic-classes=10", "--torch-threads=1",
               "--lr=0.001", "--fused-models=%d" % fused, "--save=" + path, "--log-level=warn"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("sophon-train failed (%s):\n%s" % (" ".join(command), result.stderr))


def check(arch, path):
    state = {k: v for k, v in torch.jit.load(path).state_dict().items()
             if not k.startswith("sophon_")}
    for name, tensor in state.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            sys.exit("%s from %s: %s is not finite" % (arch, path, name))
    model = getattr(torchvision.models, arch)(num_classes=10)
    model.load_state_dict(state, strict=True)  # raises on a missing, extra or reshaped tensor
    model.eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    if tuple(out.shape) != (2, 10) or not torch.isfinite(out).all():
        sys.exit("%s from %s: bad output %s" % (arch, path, out))
    print("ok: %s loads into torchvision.models.%s" % (path, arch))


def main():
    train, temp = sys.argv[1], sys.argv[2]
    os.makedirs(temp, exist_ok=True)
    save(train, "resnet18", os.path.join(temp, "r18.pt"), fused=2)
    for k in range(2):
        check("resnet18", os.path.join(temp, "r18.%d.pt" % k))
    save(train, "resnet50", os.path.join(temp, "r50.pt"), fused=0)
    check("resnet50", os.path.join(temp, "r50.pt"))


if __name__ == "__main__":
    main()
