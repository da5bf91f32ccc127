"""Stopping: break, del, consumer exceptions, Ctrl-C and interpreter exit end every native
thread promptly; a forked child (DataLoader worker) inherits none.

No wall-clock thresholds, so the tests hold on a loaded machine: promptness is asserted with
counts where a count can show it (Ctrl-C: the batch it never finished; the engine's stop in
tests/cpp/test_engine.cc: no sample started after it), and elsewhere generous timeouts catch
hangs."""

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import loadscope as ls
from conftest import native_threads


def make(demo, **kw):
    args = dict(fields={"jpg": ls.Image(32)}, batch_size=4, threads=4, prefetch=4)
    args.update(kw)
    return ls.Loader(ls.Folder(demo / "folder"), **args)


def wait_for_threads(n, timeout=60.0):
    deadline = time.time() + timeout
    while native_threads() > n and time.time() < deadline:
        time.sleep(0.01)
    return native_threads()


def test_break_stops_every_thread(demo):
    before = native_threads()
    loader = make(demo)
    for i, _ in enumerate(loader):
        assert native_threads() > before  # planner + workers run during the epoch
        if i == 2:
            break
    gc.collect()
    assert wait_for_threads(before) == before


def test_del_of_a_running_loader_and_iterator(demo):
    before = native_threads()
    loader = make(demo)
    it = iter(loader)
    next(it)
    del it, loader
    gc.collect()
    assert wait_for_threads(before) == before


def test_a_loader_nobody_references_is_freed_at_once_without_the_garbage_collector(demo):
    """No reference cycle holds a loader (or its parts) alive: dropped, it is freed by its
    reference count, and its threads end, with the cycle collector off. A loader kept by a
    cycle keeps its native threads until a collection, and a fork meanwhile copies them mid-work
    (forked DataLoader workers hung in a full test run, 2026-12-04)."""
    import weakref

    before = native_threads()
    gc.disable()
    try:
        loader = make(demo, map=lambda b: b)
        loader.report_every(3600, lambda report: None)
        for i, _ in enumerate(loader):
            if i == 2:
                break
        loader.telemetry()
        ref = weakref.ref(loader)
        del loader, _
        assert ref() is None
        assert wait_for_threads(before) == before
    finally:
        gc.enable()


def test_consumer_exception_stops_the_epoch(demo):
    before = native_threads()
    with pytest.raises(RuntimeError, match="training step failed"):
        for _ in make(demo):
            raise RuntimeError("training step failed")
    gc.collect()
    assert wait_for_threads(before) == before


def test_a_new_epoch_ends_the_old_one(demo):
    before = native_threads()
    loader = make(demo)
    first = iter(loader)
    next(first)
    second = iter(loader)  # starting epoch 1 closes epoch 0, which then says so
    with pytest.raises(ls.LoadscopeError, match="a new iteration over the same Loader started"):
        next(first)
    assert len(list(second)) == 30
    del first, second
    gc.collect()
    assert wait_for_threads(before) == before


def test_ctrl_c_interrupts_a_waiting_next(demo, real):
    """SIGINT while __next__ waits in C++ raises KeyboardInterrupt within a wait slice, and the
    epoch's threads are gone after it. Prompt means: the batch being waited for was never
    finished (a next() that only looked at signals between batches would have decoded it)."""
    before = native_threads()
    big = real / "exif-orientation-examples/Landscape_1.jpg"  # ~7 ms each: the wait is long
    import json

    manifest = demo.parent / "slow.jsonl"
    manifest.write_text("\n".join(json.dumps({"path": str(big)}) for _ in range(400)))
    loader = ls.Loader(ls.FileList(manifest), fields={"jpg": ls.Image(32, crop="resize", dct_scaling=False)}, batch_size=400, threads=1)
    # Python installs its Ctrl-C handler only when SIGINT is not ignored at startup; a shell
    # without job control starts background jobs (CI runners among them) with SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            next(iter(loader))
        assert wait_for_threads(before) <= before
        # (a stage with no items yet is absent from the snapshot)
        assert loader.telemetry()["stages"].get("decode", {}).get("image", {}).get("items", 0) < 400
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)


def test_interpreter_exit_with_a_live_epoch_is_prompt(demo):
    code = textwrap.dedent(
        f"""
        import loadscope as ls
        loader = ls.Loader(ls.Folder({str(demo / 'folder')!r}), fields={{"jpg": ls.Image(32)}},
                           batch_size=4, threads=2, prefetch=8)
        it = iter(loader)
        next(it)
        print("started", flush=True)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "started" in out.stdout


@pytest.mark.parametrize("idle", [False, True])
def test_fork_child_inherits_no_running_epoch(demo, idle):
    """A child forked during an epoch: the parent's epoch is unusable there, a new one works
    (on one thread: Note [fork during an epoch]). idle: the parent's workers are idle at the
    fork (every prefetch slot holds a ready batch), the case that used to hang the child's new
    epoch; it is waited for on the engine's clock (a second of back-pressure: oneTBB's idle
    workers have gone from spinning to asleep by then), not by a sleep."""
    loader = make(demo, threads=2)
    it = iter(loader)
    next(it)
    deadline = time.time() + 60
    while idle and loader.telemetry()["queue"]["back_pressure_seconds"] < 1.0:
        assert time.time() < deadline, "the prefetch never filled"
        time.sleep(0.01)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        signal.alarm(60)  # a hang kills the child; the parent sees no result
        try:
            ok = native_threads() == 1
            try:
                next(it)
                ok = False
            except ls.LoadscopeError as e:
                ok = ok and "forked" in str(e)
            n = sum(len(b["__key__"]) for b in make(demo, threads=2))
            os.write(w, f"{int(ok)} {n}".encode())
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.time() + 90
    while time.time() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
        time.sleep(0.1)
    else:
        if time.time() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    msg = os.read(r, 100).decode()
    assert msg == "1 120", "the child's new epoch did not finish" if not msg else msg
    assert len(next(it)["__key__"]) == 4  # the parent's epoch is unaffected


def test_a_process_allowed_one_cpu_loads_and_stops(demo):
    """A process whose affinity mask holds one CPU (taskset, a cpuset of one, a SLURM task with
    one core): oneTBB's default parallelism is then 1, and stopping an epoch used to spin in
    tbb::finalize forever once the loader's worker request was withdrawn before it. Epochs of
    1 and 3 threads, ended early and run to the end, in a child pinned to one CPU; the timeout
    only catches a hang."""
    code = textwrap.dedent(f"""
        import os
        os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
        import loadscope as ls
        for threads in (1, 3):
            L = ls.Loader(ls.Folder({str(demo / "folder")!r}), fields={{"jpg": ls.Image(32)}}, batch_size=8,
                          threads=threads)
            for i, _ in enumerate(L):
                if i == 2:
                    break
            print(threads, sum(len(b["jpg"]) for b in L), flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    n = len(ls.Folder(demo / "folder"))
    assert out.stdout.split() == ["1", str(n), "3", str(n)]
