#!/usr/bin/python3
"""Train a torchvision ResNet with batches from Sophon storage servers.

    # one process
    PYTHONPATH=build/python examples/train.py --servers=127.0.0.1:50051 --epochs=2
    # two data-parallel ranks (DistributedDataParallel; NCCL on cuda, else Gloo), torch 2.x
    PYTHONPATH=build/python torchrun --nproc-per-node=2 examples/train.py --servers=...
    # Debian 12's torch 1.13: its torchrun wants --nproc_per_node and fails under Python
    # 3.11, so each rank is started by hand with the variables torchrun would set
    for r in 0 1; do WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=29500 PYTHONPATH=build/python examples/train.py --servers=... & done

Each rank gets its own share of every epoch (sophon.Loader takes the rank and the
world size from torch.distributed). --device=cuda trains on the GPU when the installed
PyTorch has CUDA; with --output=uint8 (the default there) the batches cross PCIe as uint8
pixels, a quarter of float32's bytes, from pinned memory, and are normalised on the GPU.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torchvision

import sophon


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", required=True, help="storage servers, host:port[,host:port...]")
    ap.add_argument("--arch", default="resnet18", help="a torchvision.models name")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64, help="per rank")
    ap.add_argument("--crop-size", type=int, default=224)
    ap.add_argument("--mode", default="smartoff", help="smartoff, nooff, resizeoff or alloff")
    ap.add_argument("--workers", type=int, default=2, help="local prep threads")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--max-batches", type=int, default=0, help="per epoch; 0 = all")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dist-backend", default="auto", choices=["auto", "nccl", "gloo"],
                    help="c10d backend of the ranks (torchrun): auto = nccl on cuda, else gloo")
    ap.add_argument("--output", default="",
                    help="float32 (normalised on the host) or uint8 (normalised on the device); "
                         "default uint8 on cuda, float32 on cpu")
    ap.add_argument("--profile-folder", default="", help="smartoff's dataset profile")
    args = ap.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None and distributed:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if distributed:
        backend = args.dist_backend
        if backend == "auto":
            backend = "nccl" if device.type == "cuda" else "gloo"
        if backend == "nccl" and device.type != "cuda":
            ap.error("--dist-backend=nccl needs --device=cuda")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        try:
            dist.init_process_group(backend)
        except RuntimeError as e:
            # torch 2.4 and later default to the libuv TCPStore, which a torch built without
            # libuv (Debian 13's 2.6) refuses; its classic store works everywhere.
            if "libuv" not in str(e):
                raise
            os.environ["USE_LIBUV"] = "0"
            dist.init_process_group(backend)
    rank = dist.get_rank() if distributed else 0
    output = args.output or ("uint8" if device.type == "cuda" else "float32")

    with sophon.Loader(args.servers, batch_size=args.batch_size, mode=args.mode,
                       crop_size=args.crop_size, workers=args.workers,
                       profile_folder=args.profile_folder,
                       max_batches=args.max_batches, output=output) as loader:
        model = getattr(torchvision.models, args.arch)(num_classes=len(loader.classes))
        model = model.to(device)
        if distributed:
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9,
                                    weight_decay=1e-4)
        loss_fn = torch.nn.CrossEntropyLoss()
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            model.train()
            start, seen, total_loss = time.monotonic(), 0, 0.0
            for images, labels in loader:
                if device.type == "cuda":
                    images = images.pin_memory()  # a copy the GPU can read asynchronously
                images = images.to(device, non_blocking=True)
                labels = labels.to(device, non_blocking=True)
                if output == "uint8":
                    images = sophon.normalize(images)  # on the device: float32 N x 3 x S x S
                loss = loss_fn(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                seen += images.shape[0]
                total_loss += loss.item() * images.shape[0]
            took = time.monotonic() - start
            if rank == 0:
                report = loader.report()
                print(f"epoch {epoch}: {seen} images in {took:.2f}s ({seen / took:.1f} img/s "
                      f"on rank 0), loss {total_loss / max(seen, 1):.4f}, "
                      f"{report['bytes_received'] / 1e6:.1f} MB received, stages "
                      f"{ {k: v for k, v in report['samples_by_stage'].items() if v} }",
                      flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
