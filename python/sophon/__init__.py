"""Sophon: a training-data loader that offloads preprocessing to storage nodes.

    import sophon
    loader = sophon.Loader(["storage1:50051"], batch_size=256)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:      # torch tensors: float32 N x 3 x S x S, int64 N
            ...

With output="uint8" the images are uint8 N x S x S x 3 (cropped and flipped, a
quarter of the bytes): copy them to the GPU and normalise there with
sophon.normalize(images), which gives the float32 batch bit for bit.

The batches come from the C++ loader that sophon-train runs: every sample's crop
and flip are a function of (seed, epoch, sample id) wherever it is processed, so
every mode gives the same bytes.
"""

import json as _json

from . import _sophon

__all__ = ["Loader", "Server", "plan", "normalize", "IMAGENET_MEAN", "IMAGENET_STD"]

# The normalisation of the float32 output (torchvision's ImageNet constants).
IMAGENET_MEAN = _sophon.IMAGENET_MEAN
IMAGENET_STD = _sophon.IMAGENET_STD

try:  # a Loader is a torch IterableDataset when torch is there (DataLoader accepts it)
    from torch.utils.data import IterableDataset as _Base
    from torch.utils.data import get_worker_info as _worker_info
except ImportError:  # the NumPy interface (Loader.batches) works without torch
    _Base = object

    def _worker_info():
        return None


def _torch():
    import torch  # the PyTorch the user has: the extension needs no LibTorch
    return torch


def _default_rank_world(rank, world_size):
    if rank is not None and world_size is not None:
        return rank, world_size
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return (dist.get_rank() if rank is None else rank,
                    dist.get_world_size() if world_size is None else world_size)
    except ImportError:
        pass
    return (0 if rank is None else rank), (1 if world_size is None else world_size)


def normalize(images):
    """uint8 N x S x S x 3 images (output="uint8"), on any device, as the float32
    N x 3 x S x S batch that output="float32" gives: x * (1 / (255 std)) + (-mean / std)
    per channel, in float32 as the C++ loader computes it (the same bits)."""
    torch = _torch()
    if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[3] != 3:
        raise ValueError(f"normalize: expected uint8 N x S x S x 3 images, got "
                         f"{images.dtype} of shape {tuple(images.shape)}")
    mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float32, device=images.device)
    std = torch.tensor(IMAGENET_STD, dtype=torch.float32, device=images.device)
    a = (1.0 / (255.0 * std)).view(1, 3, 1, 1)
    b = (-mean / std).view(1, 3, 1, 1)
    x = images.permute(0, 3, 1, 2).to(torch.float32)
    return (x * a + b).contiguous()


class Loader(_Base):
    """Batches of (images, labels) from one or more Sophon storage servers.

    servers: addresses host:port (a list, or one string with commas). Several
        servers hold shards or replicas of the dataset, as sophon-train's
        --server.
    batch_size: samples per batch, per rank.
    mode: smartoff (per-sample plan from a profile; the default), nooff,
        resizeoff or alloff (every sample processed to the same stage on the
        storage node).
    augment: "random" (RandomResizedCrop per scale and ratio, and random flips, new every
        epoch) or "none" (torchvision's evaluation transform: the shorter side resized to
        eval_resize, 0 = round(crop_size * 256 / 224), a centre crop, no flip; the same
        every epoch), as sophon-train's --augment and --eval-resize.
    output: "float32" (images normalised, N x 3 x S x S, ready for the model) or
        "uint8" (N x S x S x 3 after the crop and the flip, four times fewer
        bytes to copy to a GPU; sophon.normalize finishes them on the device).
    crop_size, seed, workers (local prep threads), prefetch_batches: as
        sophon-train's --crop-size, --seed, --workers, --prefetch-batches.
    shuffle_window: 0 shuffles each epoch fully; K >= 1 draws samples from K
        open groups of the servers' packs at a time (as sophon-train's
        --shuffle-window), so a pack's server reads each group once.
    scale, ratio: RandomResizedCrop's area and aspect ratio ranges, as
        sophon-train's --scale and --ratio.
    lenient_jpeg: accept JPEGs with corrupt-data warnings; must match the
        servers' --lenient-jpeg.
    on_bad_sample: skip (warn, count and go on) or fail (raise).
    rank, world_size: this process's share of every epoch; by default those of
        torch.distributed when a process group is initialised, else 0 and 1.
    profile_folder: smartoff's dataset profile (made on first use).
    planner, net_bw, remote_cpus, gpu_batch_seconds, replan_threshold, stages: smartoff's
        options, as sophon-train's flags of the same names: the planner (optimal or
        sophon); the link in Mbit/s (0: measured); the storage node's CPUs (0: its prep
        workers); the training step's seconds per batch (negative: measured from the time
        the caller spends between batches); the drift that re-plans; the stages a plan may
        use ("all", or e.g. "raw,cropped,flipped").
    max_batches: only the first N batches of every epoch (0: all), as
        sophon-train's --max-batches; nothing beyond them is fetched.
    connect_timeout: seconds to wait for an unreachable server.
    tls_ca, tls_cert, tls_key, tls_server_name, auth_token_file: as
        sophon-train's flags of the same names.

    Errors are raised as Python exceptions naming the option, sample, file or
    address: ValueError for a bad option, ConnectionError for a server that
    cannot be reached, RuntimeError otherwise.
    """

    def __init__(self, servers, batch_size=256, mode="smartoff", crop_size=224, seed=0,
                 workers=2, prefetch_batches=3, rank=None, world_size=None, drop_last=False,
                 scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), lenient_jpeg=False,
                 on_bad_sample="skip", augment="random", eval_resize=0, output="float32", profile_folder="", max_batches=0,
                 planner="optimal", net_bw=0.0, remote_cpus=0.0, gpu_batch_seconds=-1.0,
                 replan_threshold=0.25, stages="all", connect_timeout=30.0, tls_ca="", tls_cert="", tls_key="", tls_server_name="",
                 auth_token_file="", shuffle_window=0):
        if isinstance(servers, str):
            servers = [s for s in servers.replace(" ", "").split(",") if s]
        rank, world_size = _default_rank_world(rank, world_size)
        self._impl = _sophon.Loader(
            servers=list(servers), batch_size=batch_size, mode=mode, crop_size=crop_size,
            seed=seed, workers=workers, prefetch_batches=prefetch_batches, rank=rank,
            world_size=world_size, drop_last=drop_last, scale=tuple(map(float, scale)),
            ratio=tuple(map(float, ratio)), lenient_jpeg=bool(lenient_jpeg),
            on_bad_sample=on_bad_sample, augment=augment, eval_resize=int(eval_resize),
            output=output, connect_timeout=float(connect_timeout),
            profile_folder=profile_folder, planner=planner, net_bw=float(net_bw),
            remote_cpus=float(remote_cpus), gpu_batch_seconds=float(gpu_batch_seconds),
            replan_threshold=float(replan_threshold), stages=stages, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key,
            tls_server_name=tls_server_name, auth_token_file=auth_token_file,
            shuffle_window=int(shuffle_window))
        self._epoch = 0
        self._start_position = 0  # where the next iteration of self._epoch starts
        self._cursor = 0          # global position after the last batch yielded
        self._started = None      # the epoch whose iteration is under way
        self._closed = False
        self._options = {"seed": seed, "world_size": world_size, "batch_size": batch_size,
                         "shuffle_window": int(shuffle_window)}
        if max_batches < 0:
            raise ValueError(f"max_batches must be >= 0 (0: every batch), got {max_batches}")
        self._max_batches = int(max_batches)

    @property
    def num_samples(self):
        """Samples in the dataset (all servers, all ranks)."""
        return self._impl.num_samples()

    @property
    def classes(self):
        """The class names; a label is an index into them."""
        return self._impl.class_names()

    def set_epoch(self, epoch):
        """The epoch the next iteration yields (its order and augmentations)."""
        if int(epoch) != self._epoch:
            self._start_position = 0
        self._epoch = int(epoch)

    def state_dict(self):
        """The data cursor: the epoch and the global position after the last batch yielded
        (what sophon-train's checkpoints keep). load_state_dict resumes there."""
        return {"epoch": self._epoch, "position": self._cursor, **self._options}

    def load_state_dict(self, state):
        """Resumes at a state_dict's cursor: the next iteration continues its epoch after the
        last batch it had yielded, with no sample repeated or skipped. The seed must be the
        same; the world size may differ when the position is a multiple of the global batch."""
        if state.get("seed", self._options["seed"]) != self._options["seed"]:
            raise ValueError(f"load_state_dict: the state was saved with seed {state['seed']}, "
                             f"this loader has seed {self._options['seed']}")
        window = state.get("shuffle_window", 0)
        if window != self._options["shuffle_window"]:
            raise ValueError(f"load_state_dict: the state was saved with shuffle_window {window}, "
                             f"this loader has shuffle_window {self._options['shuffle_window']}")
        self._epoch = int(state["epoch"])
        self._start_position = int(state["position"])
        self._cursor = self._start_position

    def __len__(self):
        """Batches per epoch for this rank (from the resume position, after load_state_dict)."""
        if self._started is None:
            self._impl.start_epoch(self._epoch, self._start_position, self._max_batches)
            self._started = self._epoch
        return self._impl.num_batches()

    def batches(self):
        """The epoch's batches as NumPy arrays (images, labels, ids, cursor), no torch."""
        if self._closed:
            raise RuntimeError("the loader is closed")
        if _worker_info() is not None:
            raise RuntimeError(
                "sophon.Loader runs its own prep threads (workers=) and fetches each sample "
                "once per epoch: in a DataLoader worker process every worker would load the "
                "whole epoch. Use torch.utils.data.DataLoader(loader, batch_size=None, "
                "num_workers=0), or iterate the loader directly.")
        if self._started != self._epoch:
            self._impl.start_epoch(self._epoch, self._start_position, self._max_batches)
        self._started = None
        self._start_position = 0
        while True:
            batch = self._impl.next()
            if batch is None:
                return
            self._cursor = batch[3]
            yield batch

    def __iter__(self):
        torch = _torch()
        for images, labels, _ids, _cursor in self.batches():
            yield torch.from_numpy(images), torch.from_numpy(labels)

    def report(self):
        """The current epoch's figures: samples, bytes, samples and bytes by stage, CPU."""
        return self._impl.report()

    def close(self):
        """Stops the streams and joins the loader's threads. Idempotent."""
        if not self._closed:
            self._impl.close()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Server:
    """A storage server inside this Python process, for tests and notebooks (storage nodes
    run the sophon-server program). It serves an ImageFolder tree (one sub-directory per
    class) on host:port; port 0 picks a free one, see .address.

        with sophon.Server("/data/train") as server:
            loader = sophon.Loader(server.address, batch_size=64)

    prep_workers: the threads that process samples for clients (sophon-server's
        --prep-workers); lenient_jpeg: accept JPEGs with corrupt-data warnings;
    tls_cert, tls_key, tls_client_ca, auth_token_file: as sophon-server's flags.
    Every other setting is sophon-server's default.
    """

    def __init__(self, data, host="127.0.0.1", port=0, prep_workers=2, lenient_jpeg=False,
                 tls_cert="", tls_key="", tls_client_ca="", auth_token_file=""):
        self._impl = _sophon.Server(
            data=str(data), host=host, port=int(port), prep_workers=int(prep_workers),
            lenient_jpeg=bool(lenient_jpeg), tls_cert=tls_cert, tls_key=tls_key,
            tls_client_ca=tls_client_ca, auth_token_file=auth_token_file)

    @property
    def address(self):
        """host:port that clients connect to."""
        return self._impl.address()

    @property
    def port(self):
        return self._impl.port()

    @property
    def num_samples(self):
        return self._impl.num_samples()

    def stop(self, grace=2.0):
        """Stops accepting calls, lets streams end for up to `grace` seconds. Idempotent."""
        self._impl.stop(float(grace))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def plan(profile, net_bw=500.0, remote_cpus=4.0, workers=2.0, gpu_batch_seconds=0.0,
         batch_size=256, stages="all", remote_speed=0.0, recv_ns_per_byte=0.0,
         read_ns_per_byte=0.0, send_ns_per_byte=0.0, servers=1, layout="sharded",
         server_net_bw=(), server_remote_cpus=(), ingress_bw=0.0, times="", times_profile="",
         crop_size=0):
    """What-if planning over a dataset profile: the dict that `sophon-plan --json` prints
    for the same options (each argument is the flag of the same name). For every fixed
    mode and planner: the predicted epoch time, bytes on the wire, bottleneck, samples at
    each stage and the lower bound; with servers > 1, each server's share.

    profile: a profile folder (as smartoff writes it, e.g. Loader(profile_folder=...)) or
        file. net_bw, server_net_bw, ingress_bw in Mbit/s.
    """
    return _json.loads(_sophon.plan_json(
        profile=str(profile), net_bw=float(net_bw), remote_cpus=float(remote_cpus),
        workers=float(workers), gpu_batch_seconds=float(gpu_batch_seconds),
        batch_size=int(batch_size), stages=stages, remote_speed=float(remote_speed),
        recv_ns_per_byte=float(recv_ns_per_byte), read_ns_per_byte=float(read_ns_per_byte),
        send_ns_per_byte=float(send_ns_per_byte), servers=int(servers), layout=layout,
        server_net_bw=[float(x) for x in server_net_bw],
        server_remote_cpus=[float(x) for x in server_remote_cpus],
        ingress_bw=float(ingress_bw), times=str(times), times_profile=str(times_profile),
        crop_size=int(crop_size)))
