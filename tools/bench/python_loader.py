#!/usr/bin/python3
"""Throughput of the Python loader (sophon.Loader) against its peers, on one machine.

Three loaders read the same ImageFolder tree and produce the same batches (decode,
RandomResizedCrop, flip, to-tensor, normalise; float32 N x 3 x S x S):

  cpp          sophon-bench-loader: Sophon's C++ loader alone, against a sophon-server
               on loopback;
  python       sophon.Loader, the same C++ loader through the Python module, yielding
               torch tensors, against the same server, with the same options;
  torchvision  torchvision.datasets.ImageFolder + DataLoader(num_workers=W), reading the
               files itself (the usual PyTorch input pipeline).

Each runs in its own process, E epochs; the median rate of epochs 1 .. E-1 counts (the
first warms the page cache, the connections and the buffers). The three alternate, R rounds, so that
drift on a shared machine hits all of them; the report gives each round's rates, the
median, and python / cpp and python / torchvision per round.

    /usr/bin/python3 tools/bench/python_loader.py --data=build/bench-photos-openimages-1000

Prints a table, then one JSON line.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def epoch_rates(loader, epochs, set_epoch=None):
    """Images per second of each of `epochs` passes over `loader` (batches of
    (images, labels)); set_epoch(epoch) is called before each pass."""
    rates = []
    for epoch in range(epochs):
        if set_epoch is not None:
            set_epoch(epoch)
        start, images = time.monotonic(), 0
        for batch, _labels in loader:
            images += batch.shape[0]
        rates.append(images / (time.monotonic() - start))
    return rates


def run_python_loader(args):
    import sophon
    with sophon.Loader(args.server, batch_size=args.batch_size, mode=args.mode,
                       crop_size=args.crop_size, workers=args.workers, output=args.output) as loader:
        rates = epoch_rates(loader, args.epochs, loader.set_epoch)
    print(json.dumps({"rates": rates}))


def run_torchvision(args):
    import torch
    import torchvision
    from torchvision import transforms
    torch.set_num_threads(1)
    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.crop_size), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    dataset = torchvision.datasets.ImageFolder(args.data, transform=transform)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, persistent_workers=True)
    print(json.dumps({"rates": epoch_rates(loader, args.epochs)}))


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") or line.startswith("["):
            return json.loads(line)
    raise RuntimeError(f"no JSON line in:\n{text}")


def measure(kind, args, server):
    env = dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"))
    common = [f"--batch-size={args.batch_size}", f"--crop-size={args.crop_size}",
              f"--workers={args.workers}", f"--epochs={args.epochs}"]
    if kind == "cpp":
        cmd = [os.path.join(args.build, "sophon-bench-loader"), f"--server={server}",
               f"--mode={args.mode}", f"--output={args.output}", *common]
    else:
        cmd = [sys.executable, os.path.abspath(__file__), f"--role={kind}", f"--server={server}",
               f"--data={args.data}", f"--mode={args.mode}", f"--output={args.output}", *common]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    result = last_json(out.stdout)
    rates = [e["images"] / e["seconds"] for e in result] if kind == "cpp" else result["rates"]
    return statistics.median(rates[1:]) if len(rates) > 1 else rates[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="an ImageFolder tree of JPEGs")
    ap.add_argument("--build", default="build", help="the build folder")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--crop-size", type=int, default=224)
    ap.add_argument("--workers", type=int, default=2,
                    help="Sophon's prep threads; torchvision's DataLoader worker processes")
    ap.add_argument("--epochs", type=int, default=3,
                    help="per run; the median of all but the first counts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", default="nooff",
                    help="Sophon's mode (nooff: the training node does every op, as torchvision)")
    ap.add_argument("--output", default="float32", help="Sophon's output: float32 or uint8")
    ap.add_argument("--prep-workers", type=int, default=2, help="the server's --prep-workers")
    ap.add_argument("--kinds", default="cpp,python,torchvision")
    ap.add_argument("--role", default="", help=argparse.SUPPRESS)
    ap.add_argument("--server", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "python":
        return run_python_loader(args)
    if args.role == "torchvision":
        return run_torchvision(args)

    server = subprocess.Popen(
        [os.path.join(args.build, "sophon-server"), f"--data={args.data}", "--host=127.0.0.1",
         "--port=0", f"--prep-workers={args.prep_workers}", "--stats-interval=0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    address = None
    for line in server.stdout:
        if line.startswith("listening on "):
            address = line.split()[-1]
            break
    if not address:
        sys.exit("sophon-server did not start")
    kinds = args.kinds.split(",")
    rates = {k: [] for k in kinds}
    try:
        for r in range(args.rounds):
            for kind in kinds:
                rates[kind].append(measure(kind, args, address))
                print(f"round {r}: {kind:12s} {rates[kind][-1]:8.1f} images/s", flush=True)
    finally:
        server.terminate()
        server.wait()
    print(f"\n{args.data}: batch {args.batch_size}, crop {args.crop_size}, {args.workers} "
          f"workers, mode {args.mode}, output {args.output}; images/s, median of epochs 1-"
          f"{args.epochs - 1} of each run")
    for kind in kinds:
        print(f"  {kind:12s} " + "  ".join(f"{x:8.1f}" for x in rates[kind]) +
              f"   median {statistics.median(rates[kind]):8.1f}")
    ratios = {}
    for a, b in (("python", "cpp"), ("python", "torchvision")):
        if a in rates and b in rates:
            per_round = [x / y for x, y in zip(rates[a], rates[b])]
            ratios[f"{a}/{b}"] = per_round
            print(f"  {a}/{b}: " + "  ".join(f"{x:.3f}" for x in per_round) +
                  f"   median {statistics.median(per_round):.3f}")
    print(json.dumps({"data": args.data, "batch_size": args.batch_size,
                      "crop_size": args.crop_size, "workers": args.workers, "mode": args.mode,
                      "output": args.output, "rates": rates, "ratios": ratios}))


if __name__ == "__main__":
    main()
