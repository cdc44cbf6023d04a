"""What sophon.Loader, sophon.Server, sophon.plan and Loader.load_state_dict refuse, and how:
every error names the argument (or the state's key) and the value as the caller gave it.
Against an in-process server on loopback (port 0)."""

import math

import numpy as np
import pytest

import sophon
from test_loader import CLASSES, PER_CLASS, make_dataset

N = CLASSES * PER_CLASS  # 21 samples
BIG = 4294967295  # 2**32 - 1: above every 32-bit option


@pytest.fixture(scope="module")
def address(tmp_path_factory):
    with sophon.Server(make_dataset(str(tmp_path_factory.mktemp("data"))),
                       prep_workers=1) as server:
        yield server.address


def loader(address, **kw):
    options = dict(batch_size=4, mode="nooff", crop_size=24, workers=1, seed=5)
    options.update(kw)
    return sophon.Loader([address], **options)


def ids_of(l, epoch=None):
    if epoch is not None:
        l.set_epoch(epoch)
    return [i for b in l.batches() for i in b[2].tolist()]


@pytest.mark.parametrize("name", ["batch_size", "crop_size", "workers", "prefetch_batches",
                                  "rank", "world_size", "eval_resize", "shuffle_window",
                                  "max_batches", "seed", "local_world_size",
                                  "share_batches_window_bytes"])
def test_an_integer_out_of_range_is_refused_with_its_value(address, name):
    for value in (BIG, 2 ** 64 + 5, -(2 ** 40)):
        if name in ("max_batches", "seed", "share_batches_window_bytes") and value == BIG:
            continue  # in range for these
        with pytest.raises(ValueError, match=rf"^{name} must be .*got {value}$"):
            loader(address, augment="none", **{name: value})


def test_an_integer_argument_of_another_type_is_refused(address):
    for value in ("4", 4.0, 4.5, True, None):
        with pytest.raises(TypeError, match="^batch_size must be an integer"):
            loader(address, batch_size=value)
    with pytest.raises(TypeError, match="^eval_resize must be an integer, got str '300'"):
        loader(address, augment="none", eval_resize="300")
    assert len(loader(address, batch_size=np.int64(5))) == 5  # NumPy integers are integers


def test_a_negative_eval_resize_is_refused(address):
    # The C++ side takes eval_resize <= 0 as its default size: -5 would silently be 27.
    with pytest.raises(ValueError, match=r"^eval_resize must be an integer in \[0, .*got -5$"):
        loader(address, augment="none", eval_resize=-5)


@pytest.mark.parametrize("name", ["connect_timeout", "net_bw", "remote_cpus",
                                  "gpu_batch_seconds", "replan_threshold"])
def test_a_float_must_be_finite(address, name):
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match=rf"^{name} must be a finite number, got {value}"):
            loader(address, mode="smartoff", **{name: value})
    with pytest.raises(TypeError, match=rf"^{name} must be a number, got str '1'"):
        loader(address, mode="smartoff", **{name: "1"})


def test_connect_timeout_must_be_positive(address):
    for value in (0, -1, -0.5):
        with pytest.raises(ValueError, match=rf"^connect_timeout must be > 0 seconds, got"):
            loader(address, connect_timeout=value)


def test_scale_and_ratio_are_pairs_of_finite_numbers(address):
    with pytest.raises(ValueError, match=r"^scale\[0\] must be a finite number, got nan"):
        loader(address, scale=(math.nan, 1.0))
    with pytest.raises(ValueError, match=r"^ratio\[1\] must be a finite number, got inf"):
        loader(address, ratio=(0.5, math.inf))
    with pytest.raises(ValueError, match=r"^scale must be a pair \(min, max\) of numbers, got 3"):
        loader(address, scale=(0.1, 0.5, 1.0))
    with pytest.raises(TypeError, match=r"^ratio must be a pair"):
        loader(address, ratio=2.0)


def test_the_cpp_ranges_name_the_python_arguments(address):
    # Checked by the C++ options' validation; the messages name the argument, not the field.
    cases = [
        (dict(batch_size=0), r"^batch_size must be >= 1 \(got 0\)"),
        (dict(workers=0), r"^workers must be in \[1, 1024\] \(got 0\)"),
        (dict(prefetch_batches=0), r"^prefetch_batches must be >= 1 \(got 0\)"),
        (dict(shuffle_window=-1), r"^shuffle_window must be >= 0 \(got -1\)"),
        (dict(rank=2, world_size=2), r"^rank must be in \[0, world_size\) \(got rank 2"),
        (dict(world_size=0), r"^rank must be in \[0, world_size\)"),
        (dict(crop_size=0), r"^crop_size must be in \[1, 4096\], got 0"),
        (dict(crop_size=5000), r"^crop_size must be in \[1, 4096\], got 5000"),
        (dict(scale=(0.5, 2.0)), r"^scale must satisfy 0 < min <= max <= 1, got \(0.5, 2\)"),
        (dict(ratio=(2, 1)), r"^ratio must satisfy 0 < min <= max, got \(2, 1\)"),
        (dict(augment="none", eval_resize=10), r"^eval_resize must be .* got 10$"),
        (dict(augment="none", eval_resize=20000), r"^eval_resize must be .* got 20000$"),
    ]
    for kw, message in cases:
        with pytest.raises(ValueError, match=message):
            loader(address, **kw)


def test_server_and_plan_arguments(address, tmp_path):
    with pytest.raises(ValueError, match=rf"^port must be an integer in .*got {BIG}$"):
        sophon.Server(str(tmp_path), port=BIG)
    with pytest.raises(TypeError, match="^prep_workers must be an integer"):
        sophon.Server(str(tmp_path), prep_workers="2")
    with pytest.raises(ValueError, match=rf"^batch_size must be an integer in .*got {BIG}$"):
        sophon.plan(str(tmp_path), batch_size=BIG)
    with pytest.raises(ValueError, match=r"^net_bw must be a finite number, got nan"):
        sophon.plan(str(tmp_path), net_bw=math.nan)


def saved(**kw):
    """A state as a 1-rank loader(batch_size=4, seed=5) writes it, with `kw` changed."""
    state = {"epoch": 3, "position": 8, "seed": 5, "world_size": 1, "batch_size": 4,
             "shuffle_window": 0}
    state.update(kw)
    return state


def test_load_state_dict_refuses_a_malformed_state(address):
    with loader(address) as l:
        before = l.state_dict()
        cases = [
            (saved(epoch=-1), ValueError, r"state\['epoch'\] must be an integer in \[0, .*-1$"),
            (saved(epoch="3"), TypeError, r"state\['epoch'\] must be an integer, got str"),
            (saved(position=-4), ValueError, r"state\['position'\] must be .*got -4$"),
            (saved(position=8.0), TypeError, r"state\['position'\] must be an integer"),
            (saved(position=24), ValueError, r"state\['position'\] 24 is past the end of the "
                                             r"epoch \(21: 21 samples"),
            (saved(position=10), ValueError, r"state\['position'\] 10 is not a multiple of "
                                             r"the global batch 4"),
            (saved(world_size=0), ValueError, r"state\['world_size'\] must be .*got 0$"),
            (saved(batch_size=True), TypeError, r"state\['batch_size'\] must be an integer"),
            (saved(seed=6), ValueError, r"the state was saved with seed 6, this loader has seed 5"),
            (saved(shuffle_window=2), ValueError, r"the state was saved with shuffle_window 2"),
            (saved(dataset_fingerprint=before["dataset_fingerprint"] ^ 1), ValueError,
             "the state was saved with dataset_fingerprint"),
            (saved(bogus=1), ValueError, r"unknown key\(s\) 'bogus'"),
            ([("epoch", 3)], TypeError, "the state must be a dict"),
        ]
        for key in ("epoch", "position", "seed", "world_size", "batch_size"):
            state = saved()
            del state[key]
            cases.append((state, ValueError, rf"the state has no '{key}'"))
        for state, error, message in cases:
            with pytest.raises(error, match="^load_state_dict: " + message):
                l.load_state_dict(state)
            assert l.state_dict() == before  # a refused state changes nothing
        with pytest.raises(ValueError, match="^epoch must be an integer in"):
            l.set_epoch(-1)


def test_another_global_batch_is_refused(address):
    with loader(address) as l:
        for kw in (dict(batch_size=8), dict(batch_size=4, world_size=2)):
            with pytest.raises(ValueError, match=r"^load_state_dict: the state was saved with a "
                                                 r"global batch of 8 samples .* this loader's "
                                                 r"is 4 .* makes the global batch 8"):
                l.load_state_dict(saved(**kw))


def test_another_world_size_of_the_same_global_batch_resumes(address):
    with loader(address) as l:
        whole = ids_of(l, 3)
        l.load_state_dict(saved(batch_size=2, world_size=2))  # global batch 4, position 8
        assert ids_of(l) == whole[8:]
        assert l.state_dict()["position"] == N


def test_the_end_of_an_epoch_resumes_with_nothing_left_for_any_world_size(address):
    # 21 samples: one rank's epoch ends at 21, two ranks' at 22 (padded). Either end is the
    # end for the other world size: no rank gets a sample of the finished epoch.
    for rank in (0, 1):
        with loader(address, batch_size=2, rank=rank, world_size=2) as l:
            l.load_state_dict(saved(position=N))
            assert len(l) == 0 and ids_of(l) == []
            assert ids_of(l, 4)  # the next epoch is whole
    with loader(address) as l:
        l.load_state_dict(saved(position=N + 1, batch_size=2, world_size=2))
        assert len(l) == 0 and ids_of(l) == []
        l.load_state_dict(saved(position=N))
        assert len(l) == 0 and ids_of(l) == []


def test_load_state_dict_after_len_resumes_at_its_position(address):
    with loader(address) as l:
        whole = ids_of(l, 3)
        l.set_epoch(3)
        assert len(l) == 6  # starts epoch 3 from its beginning
        state = saved(dataset_fingerprint=l.state_dict()["dataset_fingerprint"])
        l.load_state_dict(state)
        assert len(l) == 4
        assert ids_of(l) == whole[8:]


def test_len_during_an_iteration_does_not_restart_it(address):
    with loader(address) as l:
        ids = []
        for k, b in enumerate(l.batches()):
            ids += b[2].tolist()
            assert len(l) == 6
        assert sorted(ids) == list(range(N))  # each sample once
        l.set_epoch(1)
        assert len(l) == 6
        assert sorted(ids_of(l)) == list(range(N))


def test_local_world_size_comes_from_torchrun_or_is_refused(address, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE"):
        loader(address)
    with pytest.raises(ValueError, match="local_world_size"):
        loader(address, local_world_size=0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    loader(address).close()
