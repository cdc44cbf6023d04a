"""The Python loader against a real sophon-server on loopback (port 0), over JPEG files
written by the test. Run by ctest (python_loader_test) with PYTHONPATH=build/python and
SOPHON_BUILD_DIR=build."""

import os
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

import sophon

BUILD = os.environ.get("SOPHON_BUILD_DIR", "build")
CLASSES, PER_CLASS = 3, 7  # 21 samples


def make_dataset(root, seed=0):
    rng = np.random.default_rng(seed)
    for c in range(CLASSES):
        os.makedirs(os.path.join(root, f"class_{c}"), exist_ok=True)
        for i in range(PER_CLASS):
            h, w = (int(x) for x in rng.integers(120, 260, size=2))
            yy, xx = np.mgrid[0:h, 0:w]
            img = np.stack([(xx * 255 // w), (yy * 255 // h), ((xx + yy + 40 * c) % 256)],
                           axis=-1).astype(np.uint8)
            img = np.clip(img.astype(int) + rng.integers(-20, 20, size=img.shape), 0, 255)
            Image.fromarray(img.astype(np.uint8)).save(
                os.path.join(root, f"class_{c}", f"img_{i}.jpg"), quality=90)
    return root


class Server:
    """sophon-server on 127.0.0.1 with a free port."""

    def __init__(self, data):
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "sophon-server"), f"--data={data}", "--host=127.0.0.1",
             "--port=0", "--prep-workers=1", "--stats-interval=0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + 30
        self.address = None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("listening on "):
                self.address = line.split()[-1]
                break
        assert self.address, "sophon-server did not start"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(make_dataset(str(tmp_path_factory.mktemp("data"))))
    yield s
    s.stop()


def epoch_arrays(loader, epoch):
    loader.set_epoch(epoch)
    return [(images.copy(), labels.copy(), ids.copy())
            for images, labels, ids, _cursor in loader.batches()]


def test_every_sample_once_and_torch_tensors(server):
    import torch
    with sophon.Loader([server.address], batch_size=5, mode="nooff", crop_size=32,
                       workers=1) as loader:
        assert loader.num_samples == CLASSES * PER_CLASS
        assert len(loader) == 5  # 4 full batches of 5 and one of 1
        seen = []
        for images, labels in loader:
            assert isinstance(images, torch.Tensor) and images.dtype == torch.float32
            assert images.shape[1:] == (3, 32, 32)
            assert labels.dtype == torch.int64 and labels.shape[0] == images.shape[0]
            seen.append(images.shape[0])
        assert sum(seen) == CLASSES * PER_CLASS
        ids = np.concatenate([b[2] for b in epoch_arrays(loader, 0)])
        assert sorted(ids.tolist()) == list(range(CLASSES * PER_CLASS))
        report = loader.report()
        assert report["samples"] == CLASSES * PER_CLASS
        assert report["samples_by_stage"]["raw"] == CLASSES * PER_CLASS


def test_every_mode_gives_the_same_bytes(server):
    batches = {}
    for mode in ("nooff", "resizeoff", "alloff"):
        with sophon.Loader([server.address], batch_size=4, mode=mode, crop_size=40, seed=3,
                           workers=2) as loader:
            batches[mode] = epoch_arrays(loader, 2)
    for mode in ("resizeoff", "alloff"):
        assert len(batches[mode]) == len(batches["nooff"])
        for (a, la, ia), (b, lb, ib) in zip(batches["nooff"], batches[mode]):
            assert np.array_equal(ia, ib) and np.array_equal(la, lb)
            assert a.tobytes() == b.tobytes(), mode
    # Another epoch: another order.
    with sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=40,
                       seed=3) as loader:
        other = epoch_arrays(loader, 3)
    assert not np.array_equal(other[0][2], batches["nooff"][0][2])


def test_two_ranks_cover_the_epoch_disjointly(server):
    ids = []
    for rank in (0, 1):
        with sophon.Loader([server.address], batch_size=4, mode="alloff", crop_size=24,
                           rank=rank, world_size=2) as loader:
            ids.append(np.concatenate([b[2] for b in epoch_arrays(loader, 1)]).tolist())
    n = CLASSES * PER_CLASS
    assert len(ids[0]) == len(ids[1])  # padded to a multiple of the world size
    assert set(ids[0]) | set(ids[1]) == set(range(n))
    assert len(ids[0]) + len(ids[1]) - n <= 1  # one repeated sample pads 21 to 22


def test_a_bad_option_names_itself(server):
    with pytest.raises(ValueError, match="batch_size"):
        sophon.Loader([server.address], batch_size=0, mode="nooff")
    with pytest.raises(ValueError, match="mode"):
        sophon.Loader([server.address], batch_size=4, mode="fastest")
    with pytest.raises(ValueError, match="planner"):
        sophon.Loader([server.address], batch_size=4, planner="fastest")
    with pytest.raises(ValueError, match="stages"):
        sophon.Loader([server.address], batch_size=4, stages="raw,bogus")
    with pytest.raises(ValueError, match="replan_threshold"):
        sophon.Loader([server.address], batch_size=4, replan_threshold=0)


def test_smartoff_options_reach_the_plan(server, tmp_path):
    # A 1 Mbit/s link (stated, not measured) makes every offload pay; only the stages
    # allowed may be used.
    with sophon.Loader([server.address], batch_size=4, crop_size=24, workers=1,
                       profile_folder=str(tmp_path / "profile"), net_bw=1, remote_cpus=4,
                       gpu_batch_seconds=0, stages="raw,cropped") as loader:
        assert len(list(loader)) == 6
        by_stage = loader.report()["samples_by_stage"]
    assert by_stage["cropped"] > 0, by_stage
    assert by_stage["jpeg_crop"] == by_stage["flipped"] == by_stage["tensor"] == 0, by_stage


def test_an_unreachable_server_names_its_address():
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="127.0.0.1:1"):
        sophon.Loader(["127.0.0.1:1"], batch_size=4, mode="nooff", connect_timeout=1)
    assert time.monotonic() - start < 20


def test_state_dict_resumes_without_a_repeat_or_a_gap(server):
    with sophon.Loader([server.address], batch_size=4, mode="resizeoff", crop_size=24,
                       seed=5) as loader:
        loader.set_epoch(4)
        whole = [(b[0].copy(), b[2].copy()) for b in loader.batches()]
        loader.set_epoch(4)
        it = loader.batches()
        first = [next(it) for _ in range(2)]
        state = loader.state_dict()
        del it
    assert state["epoch"] == 4 and state["position"] == 8
    with sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=24,
                       seed=5) as resumed:
        resumed.load_state_dict(state)
        rest = [(b[0].copy(), b[2].copy()) for b in resumed.batches()]
    ids = [i for b in first for i in b[2].tolist()] + [i for b in rest for i in b[1].tolist()]
    assert ids == [i for b in whole for i in b[1].tolist()]
    for (a, _), (b, _) in zip(whole[2:], rest):
        assert a.tobytes() == b.tobytes()
    with sophon.Loader([server.address], batch_size=4, mode="nooff", seed=6) as other:
        with pytest.raises(ValueError, match="seed"):
            other.load_state_dict(state)


def test_a_sophon_train_checkpoint_resumes_the_python_loader(server, tmp_path):
    """sophon-train's training checkpoint opens with torch.load (weights_only, PyTorch 2.6's
    default); its cursor continues the same epoch's order in the Python loader, and its model
    loads into torchvision's with strict=True."""
    import torch
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    subprocess.run([os.path.join(BUILD, "sophon-train"), f"--server={server.address}",
                    "--mode=nooff", "--arch=resnet18", "--batch-size=4", "--crop-size=32",
                    "--epochs=1", "--max-steps=2", "--seed=5", "--workers=1",
                    "--torch-threads=1", f"--checkpoint-dir={folder}", "--log-level=warn"],
                   check=True, timeout=300)
    checkpoint = torch.load(str(folder / "checkpoint.pt"), weights_only=True)
    assert checkpoint["format"] == "sophon-checkpoint" and checkpoint["kind"] == "training"
    assert checkpoint["steps"] == 2 and checkpoint["optimizer_kind"] == "sgd"
    cursor = checkpoint["cursor"]
    assert (cursor["epoch"], cursor["position"], cursor["batch_size"]) == (0, 8, 4)
    with sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=32,
                       seed=5) as loader:
        whole = [i for b in loader.batches() for i in b[2].tolist()]
    with sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=32,
                       seed=5) as resumed:
        resumed.load_state_dict(cursor)
        rest = [i for b in resumed.batches() for i in b[2].tolist()]
    assert rest == whole[8:]
    try:
        import torchvision
    except ImportError:
        return
    model = torchvision.models.resnet18(num_classes=checkpoint["num_classes"])
    model.load_state_dict(checkpoint["model"], strict=True)
    assert len(checkpoint["optimizer"]["state"]) == len(list(model.parameters()))


def test_as_a_dataloader_dataset(server):
    import torch
    with sophon.Loader([server.address], batch_size=5, mode="nooff", crop_size=16) as loader:
        n = sum(images.shape[0]
                for images, _ in torch.utils.data.DataLoader(loader, batch_size=None,
                                                             num_workers=0))
        assert n == CLASSES * PER_CLASS
        with pytest.raises(RuntimeError, match="num_workers=0"):
            for _ in torch.utils.data.DataLoader(loader, batch_size=None, num_workers=1):
                pass


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_memory_stays_flat_over_epochs(server):
    with sophon.Loader([server.address], batch_size=5, mode="alloff", crop_size=64,
                       workers=1) as loader:
        after = []
        for epoch in range(6):
            loader.set_epoch(epoch)
            for images, labels in loader:
                pass
            after.append(rss_bytes())
    # Epoch 0 sets up buffers and connections; the next five add (next to) nothing.
    growth = after[-1] - after[0]
    assert growth < 8 << 20, f"RSS grew {growth / 1e6:.1f} MB over epochs 1-5: {after}"


def test_the_training_example_runs(server, tmp_path):
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train.py")
    env = dict(os.environ, WORLD_SIZE="1")
    out = subprocess.run(
        [sys.executable, example, f"--servers={server.address}", "--arch=resnet18",
         "--batch-size=4", "--crop-size=32", "--mode=nooff", "--max-batches=2", "--epochs=2",
         "--output=uint8"],
        env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [l for l in out.stdout.splitlines() if l.startswith("epoch ")]
    assert len(lines) == 2 and "8 images" in lines[0], out.stdout


def test_the_training_example_on_two_gloo_ranks(server):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train.py")
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, example, f"--servers={server.address}", "--arch=resnet18",
             "--batch-size=4", "--crop-size=32", "--mode=nooff", "--epochs=1"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    # Rank 0 reports its share: 11 of the 21 samples padded to 22.
    assert "epoch 0: 11 images" in outs[0][0], outs[0][0]


def test_augmentation_and_decoding_options(server):
    def first_batch(**kw):
        with sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=24,
                           **kw) as loader:
            return next(loader.batches())[0].copy()
    assert first_batch().tobytes() == first_batch(scale=(0.08, 1.0)).tobytes()
    assert first_batch().tobytes() != first_batch(scale=(0.5, 0.5)).tobytes()
    with pytest.raises(ValueError, match="on_bad_sample"):
        first_batch(on_bad_sample="ignore")
    # The server decodes strictly: a lenient loader would decode some samples
    # differently, and is refused, naming the flag.
    with pytest.raises(Exception, match="lenient"):
        first_batch(lenient_jpeg=True)


def test_uint8_output_normalises_to_the_float32_batches(server):
    import torch
    with sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=40, seed=5,
                       workers=1) as loader:
        reference = epoch_arrays(loader, 1)
    for mode in ("nooff", "alloff"):
        with sophon.Loader([server.address], batch_size=4, mode=mode, crop_size=40, seed=5,
                           workers=1, output="uint8") as loader:
            loader.set_epoch(1)
            batches = list(loader)
            report = loader.report()
        assert report["samples_by_stage"]["tensor"] == 0, mode  # alloff stops at the pixels
        assert len(batches) == len(reference)
        for (images, labels), (ref_images, ref_labels, _ids) in zip(batches, reference):
            assert images.dtype == torch.uint8 and images.shape[1:] == (40, 40, 3)
            assert np.array_equal(labels.numpy(), ref_labels)
            assert sophon.normalize(images).numpy().tobytes() == ref_images.tobytes(), mode
    with pytest.raises(ValueError, match="output"):
        sophon.Loader([server.address], batch_size=4, mode="nooff", output="float16")


def test_batches_equal_sophon_train_byte_for_byte(server, tmp_path):
    import hashlib
    digests = tmp_path / "digests.csv"
    out = subprocess.run(
        [os.path.join(BUILD, "sophon-train"), f"--server={server.address}", "--mode=resizeoff",
         "--arch=tinycnn", "--device=cpu", "--batch-size=4", "--crop-size=32", "--seed=9",
         "--epochs=2", "--workers=1", f"--batch-digests={digests}", "--progress=false"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = digests.read_text().splitlines()
    assert lines[0] == "epoch,batch,samples,ids,images_sha256"
    expected = lines[1:]
    assert len(expected) == 2 * 6  # 21 samples: 5 batches of 4 and one of 1, two epochs
    got = []
    with sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=32, seed=9,
                       workers=2) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            for k, (images, _labels, ids, _cursor) in enumerate(loader.batches()):
                got.append(f"{epoch},{k},{len(ids)},{' '.join(map(str, ids.tolist()))},"
                           f"{hashlib.sha256(images.tobytes()).hexdigest()}")
    assert got == expected


def test_ctrl_c_interrupts_a_wait_for_a_batch(server):
    """A child process waits for a batch from a server that is stopped (SIGSTOP): SIGINT
    must raise KeyboardInterrupt in it promptly, not after the server answers."""
    import signal
    child = subprocess.Popen(
        [sys.executable, "-c", "\n".join([
            "import sys, sophon",
            f"loader = sophon.Loader(['{server.address}'], batch_size=4, mode='nooff',"
            " crop_size=24, workers=1)",
            "print('ready', flush=True)",
            "sys.stdin.readline()",  # the server is stopped now
            "try:",
            "    next(iter(loader.batches()))",
            "    print('got a batch', flush=True)",
            "except KeyboardInterrupt:",
            "    print('interrupted', flush=True)",
            "loader.close()",
        ])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ))
    try:
        assert child.stdout.readline().strip() == "ready"
        os.kill(server.proc.pid, signal.SIGSTOP)
        child.stdin.write("go\n")
        child.stdin.flush()
        time.sleep(1)  # the child is now waiting for the batch (a hang without the fix)
        os.kill(child.pid, signal.SIGINT)
        # Resume the server only after the child had its chance to react, so that an
        # answer from it cannot end the wait instead of the signal.
        try:
            out, err = child.communicate(timeout=10)
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        os.kill(server.proc.pid, signal.SIGCONT)
    assert "interrupted" in out, (out, err)


def test_plan_returns_what_sophon_plan_json_prints(server, tmp_path):
    import json
    profile = tmp_path / "profile"
    # A smartoff loader profiles the dataset through the server on first use.
    with sophon.Loader([server.address], batch_size=4, mode="smartoff", crop_size=32,
                       workers=1, profile_folder=str(profile), max_batches=1) as loader:
        assert len(list(loader)) == 1
    assert (profile / "sample_profile.csv").exists()
    for kwargs, flags in [({"net_bw": 100, "remote_cpus": 2}, ["--net-bw=100", "--remote-cpus=2"]),
                          ({"servers": 2, "server_net_bw": [100, 300], "layout": "replicated"},
                           ["--servers=2", "--server-net-bw=100,300", "--layout=replicated"])]:
        out = subprocess.run([os.path.join(BUILD, "sophon-plan"), f"--profile={profile}",
                              "--json", *flags], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert sophon.plan(str(profile), **kwargs) == json.loads(out.stdout)
    with pytest.raises(ValueError, match="server_net_bw has 1 values for 2 servers"):
        sophon.plan(str(profile), servers=2, server_net_bw=[100])
    with pytest.raises(ValueError, match="net_bw"):
        sophon.plan(str(profile), net_bw=0)
    with pytest.raises(FileNotFoundError):
        sophon.plan(str(tmp_path))


def test_an_in_process_server(tmp_path):
    data = make_dataset(str(tmp_path / "data"), seed=4)
    with sophon.Server(data, prep_workers=1) as srv:
        assert srv.num_samples == CLASSES * PER_CLASS and srv.port > 0
        with sophon.Loader(srv.address, batch_size=8, mode="alloff", crop_size=24) as loader:
            ids = np.concatenate([b[2] for b in epoch_arrays(loader, 0)])
        assert sorted(ids.tolist()) == list(range(CLASSES * PER_CLASS))
    with pytest.raises(RuntimeError, match="stopped"):
        srv.address
    with pytest.raises(ValueError, match="prep_workers"):
        sophon.Server(data, prep_workers=0)
    with pytest.raises(Exception, match="no_such_dir"):
        sophon.Server(str(tmp_path / "no_such_dir"))


def test_pip_install_offline(tmp_path):
    """pip installs the package from the source tree without network access (into a venv
    that sees Debian's packages), reusing the CMake build; it then works from any folder."""
    source = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    env = dict(os.environ, SOPHON_BUILD_DIR=os.path.abspath(BUILD))
    env.pop("PYTHONPATH", None)
    out = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation",
                          "--no-index", source], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    data = make_dataset(str(tmp_path / "data"), seed=5)
    script = "\n".join([
        "import sophon",
        "assert sophon.__file__.startswith(%r), sophon.__file__" % str(venv),
        f"with sophon.Server({data!r}, prep_workers=1) as server:",
        "    with sophon.Loader(server.address, batch_size=5, mode='nooff', crop_size=16) as l:",
        "        images, labels = next(iter(l))",
        "print(tuple(images.shape))",
    ])
    out = subprocess.run([str(venv / "bin" / "python"), "-c", script], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "(5, 3, 16, 16)", out.stdout


def test_batches_held_by_the_caller_are_never_overwritten(server):
    """The loader reuses the buffers of batches that Python has dropped; batches still held
    (here: a whole epoch's, no copies) must keep their bytes."""
    with sophon.Loader([server.address], batch_size=2, mode="nooff", crop_size=24, seed=8,
                       prefetch_batches=1) as loader:
        expected = epoch_arrays(loader, 1)  # copies
        loader.set_epoch(1)
        held = list(loader.batches())
        dropped = 0
        for _ in loader.batches():  # another pass: dropped batches are reused
            dropped += 1
    assert dropped == len(held) == len(expected)
    for (images, labels, ids, _cursor), (e_images, e_labels, e_ids) in zip(held, expected):
        assert images.tobytes() == e_images.tobytes()
        assert np.array_equal(ids, e_ids) and np.array_equal(labels, e_labels)


def test_evaluation_transform_is_the_same_every_epoch(server):
    def by_id(epoch, mode):
        with sophon.Loader([server.address], batch_size=4, mode=mode, crop_size=32, seed=2,
                           augment="none", workers=1) as loader:
            out = {}
            for images, _labels, ids in epoch_arrays(loader, epoch):
                for i, sample in enumerate(ids.tolist()):
                    out[sample] = images[i].tobytes()
            return out
    first, second = by_id(0, "nooff"), by_id(1, "alloff")
    assert set(first) == set(second) == set(range(CLASSES * PER_CLASS))
    assert first == second  # no random crop, no flip: features could be cached
    with pytest.raises(ValueError, match="augment"):
        sophon.Loader([server.address], batch_size=4, mode="nooff", augment="light")


def test_a_pack_in_the_group_order(tmp_path):
    data = make_dataset(str(tmp_path / "data"), seed=7)
    pack = str(tmp_path / "pack")
    subprocess.run([os.path.join(BUILD, "sophon-pack"), f"--data={data}", f"--out={pack}",
                    "--group-size=3", "--progress=false"], check=True, capture_output=True)
    with sophon.Server(pack, prep_workers=1) as srv:
        with sophon.Loader(srv.address, batch_size=4, mode="nooff", crop_size=24,
                           shuffle_window=2) as loader:
            ids = np.concatenate([b[2] for b in epoch_arrays(loader, 1)])
            state = loader.state_dict()
        assert sorted(ids.tolist()) == list(range(CLASSES * PER_CLASS))
        assert state["shuffle_window"] == 2
        with sophon.Loader(srv.address, batch_size=4, mode="nooff") as full:
            with pytest.raises(ValueError, match="shuffle_window"):
                full.load_state_dict(state)


def test_local_cache_on_disk_is_shared_and_kept_across_loaders(server, tmp_path):
    """Two loaders of one node (two ranks, or a job and its restart) naming the same
    local_cache_dir: what one fetched the other reads from disk, and batches are the same
    bytes as without a cache."""
    n = CLASSES * PER_CLASS
    cache_dir = str(tmp_path / "cache")
    with sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=32, seed=5,
                       workers=1) as plain:
        want = epoch_arrays(plain, 1)
    with sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=32, seed=5,
                       workers=1, local_cache_dir=cache_dir,
                       local_cache_dir_bytes=1 << 30) as first:
        epoch_arrays(first, 0)
        report = first.report()
        assert report["requested"] == n
        assert report["sample_cache_inserted"] == n
    # A second loader on the same folder: nothing is fetched, the bytes are the same.
    with sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=32, seed=5,
                       workers=1, local_cache_dir=cache_dir,
                       local_cache_dir_bytes=1 << 30) as second:
        got = epoch_arrays(second, 1)
        report = second.report()
        assert report["requested"] == 0
        assert report["sample_cache_hits"] == n
    assert len(got) == len(want)
    for (a, la, ia), (b, lb, ib) in zip(want, got):
        assert np.array_equal(ia, ib) and np.array_equal(la, lb)
        assert a.tobytes() == b.tobytes()


def test_local_cache_options_name_themselves(server, tmp_path):
    with pytest.raises(ValueError, match="local_cache_dir_bytes"):
        sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=32,
                      local_cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match="local_cache_policy"):
        sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=32,
                      local_cache_bytes=1 << 20, local_cache_policy="fifo")


def test_jobs_of_a_search_share_their_batches(server, tmp_path):
    """Three loaders in three processes with one seed and share_batches_dir (the trials of a
    search): each sample is fetched once between them, every one gets every batch, and the
    batches are the bytes a lone loader hands out."""
    n = CLASSES * PER_CLASS
    with sophon.Loader([server.address], batch_size=4, mode="nooff", crop_size=32, seed=9,
                       workers=1) as plain:
        want = [(labels.tolist(), images.tobytes()) for images, labels, _ in
                epoch_arrays(plain, 0)]
    share = str(tmp_path / "share")
    out = str(tmp_path / "job")
    script = (
        "import os, pickle, sys, time, sophon\n"
        f"loader = sophon.Loader([{server.address!r}], batch_size=4, mode='nooff', crop_size=32, "
        f"seed=9, workers=1, share_batches_dir={share!r})\n"
        # All three have the share open before any iterates.
        "open(sys.argv[1] + '.ready', 'w').close()\n"
        f"while sum(os.path.exists(f'{out}{{j}}.ready') for j in range(3)) < 3: time.sleep(0.01)\n"
        "got = [(labels.tolist(), images.numpy().tobytes()) for images, labels in loader]\n"
        "report = loader.report()\n"
        "loader.close()\n"
        "pickle.dump((got, report), open(sys.argv[1], 'wb'))\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, f"{out}{j}"], env=dict(os.environ),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for j in range(3)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    requested = 0
    for j, (p, text) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, text
        with open(f"{out}{j}", "rb") as f:
            got, report = pickle.load(f)
        assert got == want
        requested += report["requested"]
        assert report["shared_batches_read"] + report["shared_batches_published"] == len(want)
    assert requested == n
    # The last one to leave removed the batches (the lock files stay, empty).
    mine = os.path.join(share, f"sophon-{os.geteuid()}")
    assert all(name.endswith(".lock") for name in os.listdir(mine)), os.listdir(mine)


def test_two_ranks_of_a_node_profile_the_dataset_once(server, tmp_path):
    """Two smartoff loaders started at once with one profile folder: one profiles and writes
    the profile, the other waits for it and loads it."""
    folder = str(tmp_path / "profile")
    script = (
        "import sys, sophon\n"
        f"loader = sophon.Loader([{server.address!r}], batch_size=4, mode='smartoff', "
        f"crop_size=32, workers=1, rank=int(sys.argv[1]), world_size=2, "
        f"profile_folder={folder!r}, gpu_batch_seconds=0.01)\n"
        "loader.close()\n")
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(rank)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out
    written = sum(out.count("profile written to") for out in outputs)
    assert written == 1, "\n".join(outputs)
    assert os.path.exists(os.path.join(folder, "sample_profile.csv"))


def test_the_first_plan_learns_the_training_step_from_the_loop(server, tmp_path):
    """No gpu_batch_seconds: smartoff times the loop's first steps (here 0.1 s of "training"
    per batch) and predicts the first epoch again from them; the next epoch's plan starts
    with the measured step. Each prediction within 1.5x of the epoch measured."""
    step = 0.1
    with sophon.Loader([server.address], batch_size=2, mode="smartoff", crop_size=32,
                       workers=1, profile_folder=str(tmp_path / "profile")) as loader:
        measured, predicted = [], []
        for epoch in range(2):
            loader.set_epoch(epoch)
            start = time.monotonic()
            for _ in loader.batches():
                time.sleep(step)
            measured.append(time.monotonic() - start)
            predicted.append(loader.report()["predicted_seconds"])
    steps = (CLASSES * PER_CLASS + 1) // 2
    for epoch in range(2):
        assert measured[epoch] >= steps * step
        ratio = predicted[epoch] / measured[epoch]
        assert 1 / 1.5 <= ratio <= 1.5, (epoch, predicted, measured)


def test_sophon_train_with_a_disk_cache_fetches_each_sample_once_across_runs(server, tmp_path):
    """sophon-train as operators run it: --local-cache-dir keeps what the first run fetched, a
    second run fetches nothing and trains on the same batches; bad cache flags fail before any
    server is reached, naming the flag."""
    import json
    n = CLASSES * PER_CLASS
    cache = tmp_path / "cache"

    def train(name, *flags):
        report, digests = tmp_path / f"{name}.json", tmp_path / f"{name}.csv"
        out = subprocess.run(
            [os.path.join(BUILD, "sophon-train"), f"--server={server.address}", "--mode=nooff",
             "--arch=tinycnn", "--device=cpu", "--batch-size=4", "--crop-size=32", "--seed=3",
             "--epochs=2", "--workers=1", f"--report-json={report}",
             f"--batch-digests={digests}", "--progress=false", *flags],
            capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return json.loads(report.read_text())["epochs"], digests.read_text()

    plain_epochs, plain_digests = train("plain")
    flags = (f"--local-cache-dir={cache}", "--local-cache-dir-bytes=100000000")
    first, first_digests = train("first", *flags)
    assert [e["sample_cache_misses"] for e in first] == [n, 0]
    assert [e["sample_cache_hits"] for e in first] == [0, n]
    second, second_digests = train("second", *flags)
    assert [e["sample_cache_hits"] for e in second] == [n, n]
    assert [e["bytes_received"] for e in second] == [0, 0]
    assert first_digests == plain_digests == second_digests

    start = time.monotonic()
    out = subprocess.run(
        [os.path.join(BUILD, "sophon-train"), "--server=127.0.0.1:1", "--connect-timeout=60s",
         f"--local-cache-dir={cache}"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "--local-cache-dir-bytes" in out.stderr, out.stderr
    assert time.monotonic() - start < 30, "the flag was checked only after connecting"
