#!/usr/bin/python3
"""PyTorch reference for Sophon's single-core preprocessing benchmark.

Runs torchvision's ImageNet training transform, exactly as a torchvision
ImageFolder + DataLoader worker would, on every JPEG under a directory:

    img = Image.open(f).convert("RGB")          # torchvision's default (PIL) loader
    RandomResizedCrop(S) -> RandomHorizontalFlip() -> ToTensor()
        -> Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])

on one thread (torch.set_num_threads(1)). All files are read into memory first and
opened through io.BytesIO, so disk speed is excluded; pin the process to one core
(e.g. `taskset -c 1`) for a clean single-core number.

Prints a human-readable summary with a per-op time breakdown (and the rate by
process CPU time, a cross-check on a shared machine), then a final machine-readable
line (wall-clock rate):

    RESULT images_per_s=<float> files=<int>
"""

import argparse
import io
import json
import os
import random
import sys
import time

try:
    import torch
    import torchvision
    import PIL
    from PIL import Image
    from torchvision import transforms
except ImportError as exc:  # pragma: no cover - depends on the host
    sys.exit(f"torchvision_prep: missing Python module ({exc}); install the Debian packages "
             "python3-torchvision and python3-pil and run with /usr/bin/python3")

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
JPEG_EXTENSIONS = (".jpg", ".jpeg", ".JPG", ".JPEG")
OPS = ("decode", "random_resized_crop", "horizontal_flip", "to_tensor", "normalize")


def find_jpegs(root):
    """Sorted paths of all JPEG files under `root` (recursive)."""
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        paths.extend(os.path.join(dirpath, f) for f in sorted(filenames)
                     if f.endswith(JPEG_EXTENSIONS))
    return paths


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Single-thread torchvision training-transform throughput on a directory "
                    "of JPEGs (files preloaded into memory).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("data_dir", nargs="?",
                        help="directory searched recursively for *.jpg / *.jpeg")
    parser.add_argument("--dir", help="the same as the positional data_dir")
    parser.add_argument("--crop-size", type=int, default=224,
                        help="output size S of RandomResizedCrop (S x S)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="passes over the file set (each pass draws new random crops)")
    parser.add_argument("--max-files", type=int, default=0,
                        help="use at most this many files (first in sorted order); 0 = all")
    parser.add_argument("--warmup", type=int, default=5,
                        help="images processed before timing starts (not counted)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed for torch and random (crop/flip choices)")
    parser.add_argument("--json", metavar="PATH",
                        help="also write the results as JSON to PATH ('-' for stdout)")
    args = parser.parse_args(argv)
    if (args.data_dir is None) == (args.dir is None):
        parser.error("give the JPEG directory once: as data_dir or as --dir")
    args.data_dir = args.data_dir or args.dir
    if args.crop_size < 1 or args.repeat < 1 or args.max_files < 0 or args.warmup < 0:
        parser.error("--crop-size and --repeat must be >= 1; --max-files and --warmup >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    random.seed(args.seed)

    if not os.path.isdir(args.data_dir):
        sys.exit(f"torchvision_prep: error: {args.data_dir} is not a directory")
    paths = find_jpegs(args.data_dir)
    if args.max_files:
        paths = paths[:args.max_files]
    if not paths:
        sys.exit(f"torchvision_prep: error: no JPEG files under {args.data_dir}")

    # Read everything up front: the benchmark measures CPU preprocessing, not storage.
    blobs = []
    for path in paths:
        with open(path, "rb") as f:
            blobs.append(f.read())
    total_bytes = sum(len(b) for b in blobs)

    # The training transform, op by op (same objects and order as transforms.Compose).
    ops = [
        transforms.RandomResizedCrop(args.crop_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD),
    ]

    def prep(blob, op_seconds):
        t0 = time.perf_counter()
        x = Image.open(io.BytesIO(blob)).convert("RGB")
        t1 = time.perf_counter()
        op_seconds[0] += t1 - t0
        for k, op in enumerate(ops, start=1):
            x = op(x)
            t2 = time.perf_counter()
            op_seconds[k] += t2 - t1
            t1 = t2
        return x

    # Warm-up: first calls pay for lazy initialisation (allocators, kernels, caches).
    scratch = [0.0] * len(OPS)
    for i in range(args.warmup):
        prep(blobs[i % len(blobs)], scratch)

    op_seconds = [0.0] * len(OPS)
    checksum = 0.0
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(args.repeat):
        for blob in blobs:
            out = prep(blob, op_seconds)
            checksum += float(out[0, 0, 0])  # keep the result alive; negligible cost
    elapsed = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start

    images = len(blobs) * args.repeat
    images_per_s = images / elapsed
    result = {
        "images_per_s": images_per_s,
        "files": len(blobs),
        "images": images,
        "repeat": args.repeat,
        "seconds": elapsed,
        # CPU time of this process: unlike wall time, not inflated when other processes
        # share the core, so a cross-check of the wall-clock rate on a busy machine.
        "cpu_seconds": cpu_seconds,
        "cpu_images_per_s": images / cpu_seconds if cpu_seconds > 0 else float("nan"),
        "crop_size": args.crop_size,
        "mean_file_bytes": total_bytes / len(blobs),
        "ms_per_image": {op: 1000.0 * s / images for op, s in zip(OPS, op_seconds)},
        "threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__, "torchvision": torchvision.__version__,
                     "pillow": PIL.__version__},
        "checksum": checksum,
    }

    print(f"torchvision {torchvision.__version__}, torch {torch.__version__}, "
          f"Pillow {PIL.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"{len(blobs)} files ({total_bytes / len(blobs) / 1024:.1f} KiB mean) x {args.repeat} "
          f"pass(es), crop {args.crop_size}: {images} images in {elapsed:.2f} s = "
          f"{images_per_s:.1f} images/s ({1000.0 / images_per_s:.2f} ms/image); "
          f"by CPU time {result['cpu_images_per_s']:.1f} images/s")
    print("per op, ms/image: " + ", ".join(f"{op} {ms:.3f}"
                                           for op, ms in result["ms_per_image"].items()))
    if args.json == "-":
        print(json.dumps(result, indent=1))
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    print(f"RESULT images_per_s={images_per_s:.3f} files={len(blobs)}")


if __name__ == "__main__":
    main()
