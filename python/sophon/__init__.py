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
import math as _math
import operator as _operator
import os as _os
import threading as _threading
from collections.abc import Mapping as _Mapping

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


# The range of the C++ types that options are converted to.
_INT_MIN, _INT_MAX = -2 ** 31, 2 ** 31 - 1
_INT64_MAX = 2 ** 63 - 1
_UINT64_MAX = 2 ** 64 - 1


def _local_world_size(given):
    """local_world_size as given, else $LOCAL_WORLD_SIZE (torchrun sets it), else 1."""
    if given is not None:
        return given
    env = _os.environ.get("LOCAL_WORLD_SIZE", "1")
    try:
        return int(env)
    except ValueError:
        raise ValueError(f"LOCAL_WORLD_SIZE must be an integer, got {env!r}") from None


def _int(name, value, lo=_INT_MIN, hi=_INT_MAX):
    """`value` as an int for the argument `name`, refused with the value as given when it is
    not an integer (TypeError) or lies outside [lo, hi] (ValueError): the C++ options are
    32-bit ints, and the C++ validation checks their ranges within those."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got the bool {value!r}")
    try:
        value = _operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} "
                        f"{value!r}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value}")
    return value


def _float(name, value):
    """`value` as a finite float for the argument `name` (TypeError if it is not a number,
    ValueError for nan and infinities); its range is checked by the C++ validation."""
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} "
                        f"{value!r}") from None
    if not _math.isfinite(result):
        raise ValueError(f"{name} must be a finite number, got {result}")
    return result


def _float_pair(name, value):
    """`value` as a (min, max) pair of finite floats for the argument `name`."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a pair (min, max) of numbers, got {value!r}")
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a pair (min, max) of numbers, got "
                        f"{type(value).__name__} {value!r}") from None
    if len(items) != 2:
        raise ValueError(f"{name} must be a pair (min, max) of numbers, got {len(items)} "
                         f"values {value!r}")
    return tuple(_float(f"{name}[{i}]", v) for i, v in enumerate(items))


def _path(name, value):
    """A file or folder argument: a str or an os.PathLike ("" = none)."""
    try:
        value = _os.fspath(value)
    except TypeError:
        raise TypeError(f"{name} must be a path, got {type(value).__name__} {value!r}") from None
    return _string(name, value)


def _string(name, value):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    return value


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
    local_cache_bytes, local_cache_policy, local_cache_dir, local_cache_dir_bytes: this
        node's cache of whole sample files, as sophon-train's --local-cache-* flags: up to
        local_cache_bytes in memory (noevict or lru), and up to local_cache_dir_bytes in
        the folder local_cache_dir, kept across runs and shared by every loader of the node
        that names it (the ranks of a node then fetch a sample once). A held sample is not
        fetched again; smartoff plans with what is held.
    local_world_size: this job's ranks on this node (default: $LOCAL_WORLD_SIZE, as torchrun
        sets it, else 1), as sophon-train's --local-world-size: smartoff plans each rank
        with its part of the node's link and cores and of the storage servers' prep workers.
    share_batches_dir, share_batches_window_bytes: share finished batches with the other
        jobs of this node that name the same folder and make the same batches (the trials
        of a search: one dataset, seed, batch size, ranks, crop and augmentation; other
        models or learning rates), as sophon-train's --share-batches-* flags: each batch is
        fetched and prepared once, by the job that needs it first, and read by the others.
        Best on tmpfs (/dev/shm/...). Batches are kept up to share_batches_window_bytes
        behind the newest; a job further behind makes its own.
    max_batches: only the first N batches of every epoch (0: all), as
        sophon-train's --max-batches; nothing beyond them is fetched.
    connect_timeout: seconds to wait for an unreachable server (finite, > 0).
    tls_ca, tls_cert, tls_key, tls_server_name, auth_token_file: as
        sophon-train's flags of the same names.

    Threads: one iteration at a time. An iteration (a for loop over the loader, or
    batches()) belongs to the thread that started it until it ends (its last batch, an
    error, or its iterator closed or dropped). Another thread that starts one meanwhile
    (iter(), batches(), len() of another epoch, load_state_dict) gets a RuntimeError that
    names the thread iterating; hand the batches to other threads instead (a
    queue.Queue). The thread that owns the iteration may start a new one: the old iterator
    then raises RuntimeError if resumed. report(), state_dict(), num_samples, classes,
    set_epoch() and close() may be called from any thread; close() ends an iteration
    under way in another thread, whose next batch raises RuntimeError.

    Errors are raised as Python exceptions naming the option, sample, file or
    address: TypeError for an argument of the wrong type (a float or a string for an
    integer), ValueError for a bad value (out of range, with the value as given; a number
    that is not finite), ConnectionError for a server that cannot be reached, RuntimeError
    otherwise.
    """

    def __init__(self, servers, batch_size=256, mode="smartoff", crop_size=224, seed=0,
                 workers=2, prefetch_batches=3, rank=None, world_size=None, drop_last=False,
                 scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), lenient_jpeg=False,
                 on_bad_sample="skip", augment="random", eval_resize=0, output="float32", profile_folder="", max_batches=0,
                 planner="optimal", net_bw=0.0, remote_cpus=0.0, gpu_batch_seconds=-1.0,
                 replan_threshold=0.25, stages="all", connect_timeout=30.0, tls_ca="", tls_cert="", tls_key="", tls_server_name="",
                 auth_token_file="", shuffle_window=0, local_cache_bytes=0,
                 local_cache_policy="noevict", local_cache_dir="", local_cache_dir_bytes=0,
                 share_batches_dir="", share_batches_window_bytes=256 << 20,
                 local_world_size=None):
        if isinstance(servers, str):
            servers = [s for s in servers.replace(" ", "").split(",") if s]
        servers = [_string("servers", s) for s in servers]
        rank, world_size = _default_rank_world(rank, world_size)
        batch_size = _int("batch_size", batch_size)
        world_size = _int("world_size", world_size)
        seed = _int("seed", seed, 0, _UINT64_MAX)
        shuffle_window = _int("shuffle_window", shuffle_window)
        # Checked here: the C++ side takes eval_resize <= 0 as its default and never sees
        # max_batches or a non-positive timeout.
        eval_resize = _int("eval_resize", eval_resize, 0)
        max_batches = _int("max_batches", max_batches, 0, _INT64_MAX)
        connect_timeout = _float("connect_timeout", connect_timeout)
        if connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be > 0 seconds, got {connect_timeout}")
        self._impl = _sophon.Loader(
            servers=servers, batch_size=batch_size, mode=_string("mode", mode),
            crop_size=_int("crop_size", crop_size), seed=seed,
            workers=_int("workers", workers),
            prefetch_batches=_int("prefetch_batches", prefetch_batches),
            rank=_int("rank", rank), world_size=world_size, drop_last=bool(drop_last),
            scale=_float_pair("scale", scale), ratio=_float_pair("ratio", ratio),
            lenient_jpeg=bool(lenient_jpeg),
            on_bad_sample=_string("on_bad_sample", on_bad_sample),
            augment=_string("augment", augment), eval_resize=eval_resize,
            output=_string("output", output), connect_timeout=connect_timeout,
            profile_folder=_path("profile_folder", profile_folder),
            planner=_string("planner", planner), net_bw=_float("net_bw", net_bw),
            remote_cpus=_float("remote_cpus", remote_cpus),
            gpu_batch_seconds=_float("gpu_batch_seconds", gpu_batch_seconds),
            replan_threshold=_float("replan_threshold", replan_threshold),
            stages=_string("stages", stages), tls_ca=_path("tls_ca", tls_ca),
            tls_cert=_path("tls_cert", tls_cert), tls_key=_path("tls_key", tls_key),
            tls_server_name=_string("tls_server_name", tls_server_name),
            auth_token_file=_path("auth_token_file", auth_token_file),
            shuffle_window=shuffle_window,
            local_cache_bytes=_int("local_cache_bytes", local_cache_bytes, 0, _INT64_MAX),
            local_cache_policy=_string("local_cache_policy", local_cache_policy),
            local_cache_dir=_path("local_cache_dir", local_cache_dir),
            local_cache_dir_bytes=_int("local_cache_dir_bytes", local_cache_dir_bytes, 0,
                                       _INT64_MAX),
            share_batches_dir=_path("share_batches_dir", share_batches_dir),
            share_batches_window_bytes=_int("share_batches_window_bytes",
                                            share_batches_window_bytes, 1, _INT64_MAX),
            local_world_size=_int("local_world_size", _local_world_size(local_world_size), 1))
        self._epoch = 0
        self._start_position = 0  # where the next iteration of self._epoch starts
        self._cursor = 0          # global position after the last batch yielded
        self._started = None      # the epoch started by len() and not yet iterated
        # (epoch, token, thread id, thread name) of the iteration under way.
        self._iterating = None
        # Guards _iterating, _started and _start_position, and serializes starting an
        # epoch (held while the C++ loader starts one, never while waiting for a batch).
        # Reentrant: an abandoned iterator's finally may run (garbage collection) while its
        # thread holds it.
        self._lock = _threading.RLock()
        self._closed = False
        self._options = {"seed": seed, "world_size": world_size, "batch_size": batch_size,
                         "shuffle_window": shuffle_window,
                         "dataset_fingerprint": self._impl.dataset_fingerprint()}
        self._max_batches = max_batches

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
        epoch = _int("epoch", epoch, 0, _UINT64_MAX)
        with self._lock:
            if epoch != self._epoch:
                self._start_position = 0
            self._epoch = epoch

    def state_dict(self):
        """The data cursor: the epoch and the global position after the last batch yielded
        (what sophon-train's checkpoints keep), with what the position depends on: the seed,
        shuffle_window, batch_size, world_size and the servers' dataset. load_state_dict
        resumes there."""
        return {"epoch": self._epoch, "position": self._cursor, **self._options}

    # The keys of a state_dict and their ranges; shuffle_window and dataset_fingerprint may
    # be absent (0, and not checked).
    _STATE_KEYS = {"epoch": (0, _UINT64_MAX), "position": (0, _INT64_MAX),
                   "seed": (0, _UINT64_MAX), "world_size": (1, _INT_MAX),
                   "batch_size": (1, _INT_MAX), "shuffle_window": (0, _INT_MAX),
                   "dataset_fingerprint": (0, _UINT64_MAX)}
    _OPTIONAL_STATE_KEYS = ("shuffle_window", "dataset_fingerprint")
    _UNSIGNED_STATE_KEYS = ("seed", "dataset_fingerprint")

    def load_state_dict(self, state):
        """Resumes at a state_dict's cursor: the next iteration continues its epoch after the
        last batch it had yielded, with no sample repeated or skipped. The dataset, seed,
        shuffle_window and global batch (batch_size x world_size) must be this loader's; the
        world size may differ when the global batch is the same (the position counts samples
        of the epoch's global order, and every step covers the same global batch whatever
        the world size). Raises TypeError or ValueError naming the key; the loader is
        unchanged then. The "cursor" of a sophon-train training checkpoint
        (torch.load(path)["cursor"]) is such a state; its seed and dataset_fingerprint are
        kept as signed 64-bit ints (their two's complement), which this takes as well."""
        if not isinstance(state, _Mapping):
            raise TypeError(f"load_state_dict: the state must be a dict (from state_dict()), "
                            f"got {type(state).__name__}")
        unknown = sorted(str(k) for k in state if k not in self._STATE_KEYS)
        if unknown:
            raise ValueError(f"load_state_dict: unknown key(s) {', '.join(map(repr, unknown))} "
                             f"(a state_dict has {', '.join(self._STATE_KEYS)})")
        s = {}
        for key, (lo, hi) in self._STATE_KEYS.items():
            if key not in state:
                if key in self._OPTIONAL_STATE_KEYS:
                    continue
                raise ValueError(f"load_state_dict: the state has no {key!r} "
                                 f"(a state_dict has {', '.join(self._STATE_KEYS)})")
            value = state[key]
            # sophon-train's checkpoints keep these unsigned 64-bit values as their signed
            # two's complement (LibTorch's pickled ints are signed): the same number.
            if key in self._UNSIGNED_STATE_KEYS and isinstance(value, int) and \
                    -(1 << 63) <= value < 0:
                value += 1 << 64
            s[key] = _int(f"load_state_dict: state[{key!r}]", value, lo, hi)
        mine = self._options
        for key in ("dataset_fingerprint", "seed", "shuffle_window"):
            if s.get(key, 0 if key == "shuffle_window" else mine[key]) != mine[key]:
                raise ValueError(
                    f"load_state_dict: the state was saved with {key} {s.get(key, 0)}, this "
                    f"loader has {key} {mine[key]}: the epoch's order would differ")
        saved_global = s["batch_size"] * s["world_size"]
        global_batch = mine["batch_size"] * mine["world_size"]
        if saved_global != global_batch:
            raise ValueError(
                f"load_state_dict: the state was saved with a global batch of {saved_global} "
                f"samples (batch_size {s['batch_size']} x world_size {s['world_size']}), this "
                f"loader's is {global_batch} (batch_size {mine['batch_size']} x world_size "
                f"{mine['world_size']}): give a batch_size that makes the global batch "
                f"{saved_global}")
        # The saved epoch's order, padded to a multiple of its world size, ends at `end`:
        # a position there means the epoch was over; any other is a step boundary.
        n = self._impl.num_samples()
        end = -(-n // s["world_size"]) * s["world_size"]
        position = s["position"]
        if position > end:
            raise ValueError(
                f"load_state_dict: state['position'] {position} is past the end of the epoch "
                f"({end}: {n} samples padded to a multiple of world_size {s['world_size']})")
        if position == end:  # nothing left, whatever this loader's padding
            position = -(-n // mine["world_size"]) * mine["world_size"]
        elif position % global_batch != 0:
            raise ValueError(
                f"load_state_dict: state['position'] {position} is not a multiple of the global "
                f"batch {global_batch} nor the end of the epoch ({end})")
        with self._lock:
            self._refuse_if_iterated_elsewhere("load a state")
            self._epoch = s["epoch"]
            self._start_position = position
            self._cursor = position
            self._started = None  # an epoch started before (by len()) starts again from here
            self._iterating = None

    def __len__(self):
        """Batches per epoch for this rank (from the resume position, after load_state_dict)."""
        with self._lock:
            running = self._iterating is not None and self._iterating[0] == self._epoch
            if not running and self._started != self._epoch:
                self._refuse_if_iterated_elsewhere(f"start epoch {self._epoch} to count its "
                                                   f"batches")
                self._impl.start_epoch(self._epoch, self._start_position, self._max_batches)
                self._started = self._epoch
        return self._impl.num_batches()

    def _refuse_if_iterated_elsewhere(self, what):
        """RuntimeError if another thread's iteration is under way (REQUIRES: self._lock)."""
        it = self._iterating
        if it is not None and it[2] != _threading.get_ident():
            raise RuntimeError(
                f"sophon.Loader: cannot {what}: the loader is iterated by another thread "
                f"({it[3]!r}, epoch {it[0]}); one iteration at a time: let that iteration end "
                f"(its last batch, or close its iterator) first, or hand its batches to this "
                f"thread (e.g. through a queue.Queue)")

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
        me = _threading.current_thread()
        with self._lock:
            self._refuse_if_iterated_elsewhere(f"iterate epoch {self._epoch}")
            epoch = self._epoch
            if self._started != epoch:
                self._impl.start_epoch(epoch, self._start_position, self._max_batches)
            self._started = None
            self._start_position = 0
            # len() now counts this epoch, without restarting it.
            self._iterating = iteration = (epoch, object(), me.ident, me.name)
        try:
            while True:
                if self._iterating is not iteration:
                    raise RuntimeError(
                        f"sophon.Loader: this iteration of epoch {epoch} was replaced by a "
                        f"newer one (iter(), batches() or load_state_dict since): iterate the "
                        f"newer one")
                batch = self._impl.next()
                if batch is None:
                    return
                self._cursor = batch[3]
                yield batch
        finally:
            with self._lock:
                if self._iterating is iteration:
                    self._iterating = None

    def __iter__(self):
        torch = _torch()
        for images, labels, _ids, _cursor in self.batches():
            yield torch.from_numpy(images), torch.from_numpy(labels)

    def report(self):
        """The current epoch's figures: samples, bytes, samples and bytes by stage, CPU, this
        node's sample cache (sample_cache_*), and smartoff's predicted_seconds for the epoch
        (0 in the fixed modes). Without gpu_batch_seconds, smartoff times the loop's first
        steps (the time between batches) and predicts the epoch again from them."""
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
            data=_path("data", data), host=_string("host", host), port=_int("port", port),
            prep_workers=_int("prep_workers", prep_workers), lenient_jpeg=bool(lenient_jpeg),
            tls_cert=_path("tls_cert", tls_cert), tls_key=_path("tls_key", tls_key),
            tls_client_ca=_path("tls_client_ca", tls_client_ca),
            auth_token_file=_path("auth_token_file", auth_token_file))

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
        grace = _float("grace", grace)
        if grace < 0:
            raise ValueError(f"grace must be >= 0 seconds, got {grace}")
        self._impl.stop(grace)

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
        profile=_path("profile", profile), net_bw=_float("net_bw", net_bw),
        remote_cpus=_float("remote_cpus", remote_cpus), workers=_float("workers", workers),
        gpu_batch_seconds=_float("gpu_batch_seconds", gpu_batch_seconds),
        batch_size=_int("batch_size", batch_size), stages=_string("stages", stages),
        remote_speed=_float("remote_speed", remote_speed),
        recv_ns_per_byte=_float("recv_ns_per_byte", recv_ns_per_byte),
        read_ns_per_byte=_float("read_ns_per_byte", read_ns_per_byte),
        send_ns_per_byte=_float("send_ns_per_byte", send_ns_per_byte),
        servers=_int("servers", servers), layout=_string("layout", layout),
        server_net_bw=[_float("server_net_bw", x) for x in server_net_bw],
        server_remote_cpus=[_float("server_remote_cpus", x) for x in server_remote_cpus],
        ingress_bw=_float("ingress_bw", ingress_bw), times=_path("times", times),
        times_profile=_path("times_profile", times_profile),
        crop_size=_int("crop_size", crop_size)))
