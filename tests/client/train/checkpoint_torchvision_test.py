#!/usr/bin/python3
"""sophon-train's checkpoints open with torch.load and load into torchvision's models.

Trains one epoch of synthetic batches with sophon-train: a fused array of two resnet18 and one
ordinary resnet50 (--save: one model checkpoint a model). Each file is opened with
torch.load(path, weights_only=True) (PyTorch 2.6's default) and its "model" state_dict loaded
into torchvision.models.<arch>(num_classes=10) with strict=True: every parameter and buffer
under torchvision's name and shape; its logits on a batch equal those of Sophon's C++ model
(the helper program) within 1e-5. (Training checkpoints from Python: tests/python/test_loader.py.)

Usage: checkpoint_torchvision_test.py SOPHON_TRAIN CHECKPOINT_LOGITS TEMP_DIR. Exits 77
(skipped) when python3-torchvision is not installed.
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

CROP = 32


def train(sophon_train, arch, *flags):
    command = [sophon_train, "--synthetic-data", "--arch=" + arch, "--crop-size=%d" % CROP,
               "--batch-size=4", "--synthetic-samples=8", "--synthetic-classes=10",
               "--epochs=1", "--torch-threads=1", "--lr=0.001", "--log-level=warn", *flags]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("sophon-train failed (%s):\n%s" % (" ".join(command), result.stderr))


def load(path):
    checkpoint = torch.load(path, weights_only=True)
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != "sophon-checkpoint":
        sys.exit("%s: not a Sophon checkpoint dict: %r" % (path, type(checkpoint)))
    return checkpoint


def torchvision_model(arch, state, where):
    for name, tensor in state.items():
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            sys.exit("%s: %s is not a contiguous CPU tensor" % (where, name))
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            sys.exit("%s: %s is not finite" % (where, name))
    model = getattr(torchvision.models, arch)(num_classes=10)
    model.load_state_dict(state, strict=True)  # raises on a missing, extra or reshaped tensor
    return model.eval()


def check_model(logits_helper, arch, path):
    checkpoint = load(path)
    if (checkpoint["kind"], checkpoint["arch"], checkpoint["num_classes"]) != ("model", arch, 10):
        sys.exit("%s: kind/arch/classes %r" % (path, [checkpoint[k] for k in
                                                      ("kind", "arch", "num_classes")]))
    model = torchvision_model(arch, checkpoint["model"], path)
    out = path + ".logits"
    result = subprocess.run([logits_helper, path, out, str(CROP)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("%s failed on %s:\n%s" % (logits_helper, path, result.stderr))
    reference = load(out)
    with torch.no_grad():
        logits = model(reference["input"])
    diff = (logits - reference["logits"]).abs().max().item()
    if logits.shape != reference["logits"].shape or not diff <= 1e-5:
        sys.exit("%s: torchvision's logits differ from the C++ model's by %g" % (path, diff))
    print("ok: %s loads into torchvision.models.%s, logits within %g of the C++ model's"
          % (path, arch, diff))


def main():
    sophon_train, logits_helper, temp = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(temp, exist_ok=True)
    train(sophon_train, "resnet18", "--fused-models=2", "--save=" + os.path.join(temp, "r18.pt"))
    for k in range(2):
        check_model(logits_helper, "resnet18", os.path.join(temp, "r18.%d.pt" % k))
    train(sophon_train, "resnet50", "--save=" + os.path.join(temp, "r50.pt"))
    check_model(logits_helper, "resnet50", os.path.join(temp, "r50.pt"))


if __name__ == "__main__":
    main()
