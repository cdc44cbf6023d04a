"""One sophon.Loader used from several Python threads (the Loader's docstring, "Threads"):
one iteration at a time, the second one refused with a RuntimeError that names the thread
iterating; state calls and close() from any thread. Run by ctest (python_loader_test) with
PYTHONPATH=build/python and SOPHON_BUILD_DIR=build."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import sophon
from test_loader import CLASSES, PER_CLASS, Server, make_dataset

N = CLASSES * PER_CLASS

# Two threads start iterating one loader at the same moment (a prefetch thread beside the
# training loop), `rounds` times, in a child process of its own: a crash or a hang there
# fails the test instead of ending the test run.
TWO_ITERATIONS = r"""
import collections, json, sys, threading, sophon
data, rounds = sys.argv[1], int(sys.argv[2])
counts = collections.Counter()
with sophon.Server(data, prep_workers=1) as srv, \
        sophon.Loader(srv.address, batch_size=2, mode="alloff", crop_size=16, workers=1,
                      prefetch_batches=2) as loader:
    n = loader.num_samples
    for r in range(rounds):
        loader.set_epoch(r)
        barrier = threading.Barrier(2)
        results = [None, None]

        def run(k):
            barrier.wait()
            try:
                ids = [i for batch in loader.batches() for i in batch[2].tolist()]
                results[k] = ("done", sorted(ids))
            except RuntimeError as e:
                results[k] = ("refused", str(e))
            except BaseException as e:
                results[k] = ("other", repr(e))

        threads = [threading.Thread(target=run, args=(k,), name=f"iter-{k}") for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for kind, detail in results:
            if kind == "done":
                assert detail == list(range(n)), (r, "not every sample once", detail)
            elif kind == "refused":
                assert "iterated by another thread" in detail, (r, detail)
                assert "one iteration at a time" in detail, (r, detail)
            else:
                raise AssertionError((r, kind, detail))
        assert any(kind == "done" for kind, _ in results), (r, results)
        counts["+".join(sorted(kind for kind, _ in results))] += 1
print(json.dumps(counts), flush=True)
"""


def test_two_threads_iterating_one_loader_never_crash_or_hang(tmp_path):
    data = make_dataset(str(tmp_path / "data"), seed=7)
    rounds = 100
    child = subprocess.run([sys.executable, "-c", TWO_ITERATIONS, data, str(rounds)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120, env=dict(os.environ))
    assert child.returncode == 0, (child.returncode, child.stdout, child.stderr[-3000:])
    counts = json.loads(child.stdout.strip().splitlines()[-1])
    assert sum(counts.values()) == rounds, counts
    # Each round either refused the second iteration or ran both one after the other;
    # with both threads released at once, the refusal is what happens nearly always.
    assert set(counts) <= {"done+refused", "done+done"}, counts
    assert counts.get("done+refused", 0) > 0, counts


# The same through the extension module's calls (sophon._sophon.Loader, under the Python
# class): two threads start an epoch and take batches at once while a third reads the
# report; every call either is served or raises one of the documented errors.
MODULE_CALLS = r"""
import json, sys, threading, sophon
data, rounds = sys.argv[1], int(sys.argv[2])
errors = {}
with sophon.Server(data, prep_workers=1) as srv, \
        sophon.Loader(srv.address, batch_size=2, mode="alloff", crop_size=16, workers=1,
                      prefetch_batches=2) as loader:
    impl = loader._impl
    for r in range(rounds):
        barrier = threading.Barrier(3)
        done = threading.Event()

        def iterate(k):
            barrier.wait()
            try:
                impl.start_epoch(r * 2 + k)
                while impl.next() is not None:
                    pass
            except RuntimeError as e:
                key = str(e).split(":")[0] + (": iterated by another thread"
                                              if "iterated by another thread" in str(e) else "")
                errors[key] = errors.get(key, 0) + 1

        def report():
            barrier.wait()
            while not done.is_set():
                assert impl.report()["batches"] >= 0
                impl.num_batches()

        threads = [threading.Thread(target=iterate, args=(k,)) for k in (0, 1)]
        reader = threading.Thread(target=report)
        for t in threads + [reader]:
            t.start()
        for t in threads:
            t.join()
        done.set()
        reader.join()
    print(json.dumps(errors), flush=True)
"""


def test_the_extension_module_from_two_threads_never_crashes_or_hangs(tmp_path):
    data = make_dataset(str(tmp_path / "data"), seed=7)
    rounds = 100
    child = subprocess.run([sys.executable, "-c", MODULE_CALLS, data, str(rounds)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120, env=dict(os.environ))
    assert child.returncode == 0, (child.returncode, child.stdout, child.stderr[-3000:])
    errors = json.loads(child.stdout.strip().splitlines()[-1])
    # A start_epoch while the other thread waits in next() is refused; one that comes
    # between two of its next() calls restarts the epoch, and one that stops the epoch
    # under a next() about to wait ends that next() with CANCELLED.
    assert set(errors) <= {"FAILED_PRECONDITION: iterated by another thread", "CANCELLED"}, \
        errors


@pytest.fixture(scope="module")
def in_process_server(tmp_path_factory):
    with sophon.Server(make_dataset(str(tmp_path_factory.mktemp("data")), seed=8),
                       prep_workers=1) as srv:
        yield srv


def test_a_second_thread_is_refused_while_the_first_iterates(in_process_server):
    with sophon.Loader(in_process_server.address, batch_size=4, mode="alloff", crop_size=16,
                       workers=1) as loader:
        first_batch = threading.Event()
        go_on = threading.Event()
        got = {}

        def owner():
            try:
                it = loader.batches()
                ids = next(it)[2].tolist()
                first_batch.set()
                go_on.wait(30)
                ids += [i for batch in it for i in batch[2].tolist()]
                got["ids"] = ids
            except BaseException as e:  # seen by the assertions below
                got["error"] = e
                first_batch.set()

        a = threading.Thread(target=owner, name="prefetch")
        a.start()
        try:
            assert first_batch.wait(30)
            with pytest.raises(RuntimeError, match=r"iterated by another thread \('prefetch', "
                                                   r"epoch 0\); one iteration at a time"):
                next(loader.batches())
            with pytest.raises(RuntimeError, match="iterated by another thread"):
                for _ in loader:
                    pass
            state = loader.state_dict()
            assert state["epoch"] == 0 and state["position"] == 4
            with pytest.raises(RuntimeError, match="iterated by another thread"):
                loader.load_state_dict(state)
            # State calls are served from any thread.
            assert len(loader) == 6
            assert loader.report()["batches"] >= 1
            assert loader.num_samples == N
        finally:
            go_on.set()
            a.join(30)
        assert not a.is_alive()
        assert "error" not in got, got.get("error")
        assert sorted(got["ids"]) == list(range(N))  # the refusals took nothing from it
        # The owner's iteration is over: any thread may iterate now.
        ids = [i for batch in loader.batches() for i in batch[2].tolist()]
        assert sorted(ids) == list(range(N))


def test_the_owner_may_restart_and_the_old_iterator_is_refused(in_process_server):
    with sophon.Loader(in_process_server.address, batch_size=4, mode="alloff", crop_size=16,
                       workers=1) as loader:
        old = loader.batches()
        next(old)
        new = loader.batches()
        ids = next(new)[2].tolist()
        with pytest.raises(RuntimeError, match="replaced by a newer one"):
            next(old)
        ids += [i for batch in new for i in batch[2].tolist()]
        assert sorted(ids) == list(range(N))


def test_close_from_another_thread_ends_a_wait_for_a_batch(tmp_path):
    """The server is stopped (SIGSTOP), so the iterating thread waits for its first batch;
    close() from another thread must end that wait at once with a RuntimeError."""
    server = Server(make_dataset(str(tmp_path / "data"), seed=9))
    try:
        loader = sophon.Loader([server.address], batch_size=4, mode="alloff", crop_size=16,
                               workers=1)
        outcome = {}

        def iterate():
            try:
                outcome["batches"] = sum(1 for _ in loader.batches())
            except BaseException as e:
                outcome["error"] = e

        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            a = threading.Thread(target=iterate, name="waiting")
            a.start()
            time.sleep(0.5)  # the thread now waits for its first batch
            assert a.is_alive(), outcome
            start = time.monotonic()
            loader.close()
            a.join(10)
            assert not a.is_alive(), "next() still waits after close()"
            assert time.monotonic() - start < 5
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert isinstance(outcome.get("error"), RuntimeError), outcome
        assert "CANCELLED: loader stopped" in str(outcome["error"]) or \
            "the loader is closed" in str(outcome["error"]), outcome
        loader.close()  # idempotent
    finally:
        server.stop()
