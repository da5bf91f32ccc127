"""One pass over the data (``_EpochIterator``), the thread that applies ``map=`` to CPU
batches (``_Mapper``), and what happens to live passes at exit and in a forked child."""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Optional

from . import _native
from ._errors import BatchTimeout, LoadscopeError

if TYPE_CHECKING:
    from ._batches import BatchMaker
    from ._loader import Batch, Loader
    from ._position import Position

log = logging.getLogger("loadscope")

_WAIT_MS = 100  # how long one native wait lasts; between waits Python sees Ctrl-C


_live: "weakref.WeakSet[_EpochIterator]" = weakref.WeakSet()
_live_lock = threading.Lock()
_orphans: list = []  # native runs inherited by a forked child: their threads do not exist there


class _EpochIterator:
    """One pass over the data. Closing it (end of data, ``break`` + garbage collection, ``del``,
    an exception, interpreter exit) stops and joins every native thread."""

    def __init__(self, owner: Loader, run, epoch: int, delivered: int, *, position: Position, batches: BatchMaker,
                 timeout: float, map_depth: Optional[int], loop: Any) -> None:
        # The loader, kept alive while its epoch runs (its reports end with it); asked only len().
        self._owner = owner
        self._position = position    # where the loader stands: told what was delivered, and the end
        self._batches = batches      # native batches into the user's form
        self._timeout = timeout      # seconds next() waits for a batch (0: as long as it takes)
        self._map_depth = map_depth  # map= in a thread of its own, this many ahead; None: no thread
        self._loop = loop            # the telemetry's training-loop clock; None when it is off
        self._run = run
        self.epoch = epoch
        self.delivered = delivered  # batches handed out in this epoch, resumed ones included
        self.finished = False       # the epoch's last batch was handed out
        self._logged_skips = 0
        self._ended_because: Optional[str] = None  # why next() raises instead of continuing
        self._mapper: Optional[_Mapper] = None  # map= on CPU batches
        self._start_delivered = delivered  # the resume point it started from
        self._failed = False  # ended by an exception
        with _live_lock:
            _live.add(self)

    def __iter__(self) -> "_EpochIterator":
        return self

    def __len__(self) -> int:
        return len(self._owner)

    def __next__(self) -> Batch:
        enter = time.monotonic_ns()
        run = self._run
        if run is None:
            if self._ended_because:
                raise LoadscopeError(f"epoch {self.epoch} {self._ended_because}")
            raise StopIteration
        if self._map_depth is not None:
            return self._next_mapped(enter)
        try:
            while True:
                b = run.next(_WAIT_MS)  # waits with the GIL released
                if not isinstance(b, str):
                    break
                self._check_timeout(enter)
        except BatchTimeout:
            self._failed = True  # dropped now, the iteration does not hand its epoch back
            raise  # the epoch goes on: the next call waits again
        except BaseException:
            self._failed = True
            self.close()
            raise
        if b is None:
            self.finished = True
            # Failures of a last batch that had nothing left come with no batch: log them here.
            self._log_skips(self._run_skips_after(run))
            self.close()
            raise StopIteration
        if b.skipped:
            self._log_skips(b.skipped)
        self.delivered += 1
        self._position.delivered(self.epoch, self.delivered)
        return self._batches.deliver(b, enter, self.epoch)

    # --- map= on CPU batches: a background thread makes and maps batches ahead -------------

    def _next_mapped(self, enter: int) -> Batch:
        if self._mapper is None:
            assert self._map_depth is not None
            self._mapper = _Mapper(self, self._run, self._map_depth)
        try:
            while True:
                item = self._mapper.get(_WAIT_MS / 1000)  # waits in short steps: Ctrl-C gets through
                if item is not None:
                    break
                self._check_timeout(enter)
        except BatchTimeout:
            self._failed = True
            raise
        except BaseException:
            self._failed = True
            self.close()
            raise
        kind, value, index = item
        if kind == "end":
            self.finished = True
            self.close()
            raise StopIteration
        if kind == "error":
            self._failed = True
            self.close()
            raise value
        self.delivered += 1
        self._position.delivered(self.epoch, self.delivered)
        if self._loop is not None:
            now = time.monotonic_ns()
            self._loop.delivered(enter, now, now, index)
        return value

    def _check_timeout(self, enter: int) -> None:
        timeout = self._timeout
        if timeout and time.monotonic_ns() - enter > timeout * 1e9:
            raise BatchTimeout(f"no batch within timeout={timeout:g} s: batch {self.delivered} of this rank's "
                               f"epoch {self.epoch} is still being made (a stalled read or decode? loader.stats() "
                               "and a trace show where the time goes); next() waits again")

    def _run_skips_after(self, run) -> list:
        """The skips of this run not yet logged (the run lists its first 1000, in order)."""
        return run.stats()["skipped"][self._logged_skips:]

    def _log_skips(self, skipped) -> None:
        for s in skipped:
            if self._logged_skips < 10:
                log.warning("skipped %s (%s error): %s", s["key"], s["kind"], s["reason"])
            elif self._logged_skips == 10:
                log.warning("more samples skipped; the full list is in loader.stats()['skipped']")
            self._logged_skips += 1

    def _supersede(self) -> None:
        if self._run is not None:
            self._ended_because = (
                "was ended early because a new iteration over the same Loader started; a Loader "
                "runs one epoch at a time (nested or zipped loops over one Loader need two Loaders)"
            )
        self.close()

    def close(self) -> None:
        """Stops the epoch early; idempotent."""
        run, self._run = self._run, None
        if run is None:
            return
        if self._mapper is not None:
            self._mapper.stop()  # before the run: the thread may be waiting in it
        gave_nothing = self.delivered == self._start_delivered and not self.finished and not self._failed
        stats: dict = {}
        try:
            stats = run.stats()
        finally:
            # Note [state after a loop]; Note [an iteration that gave nothing]
            self._position.closed(self.epoch, self._start_delivered, gave_nothing, stats)
            run.stop()
            with _live_lock:
                _live.discard(self)

    def stats(self) -> Optional[dict]:
        """The running epoch's counters; None once it ended."""
        run = self._run
        return run.stats() if run is not None else None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter teardown
            pass


class _Mapper:
    """The thread behind map= for CPU batches: takes batches from the native run in order, makes
    them (tensors, output form), applies map and queues them, at most `depth` ahead. The
    consumer's position (state_dict) counts what it took from the queue, not what was mapped."""

    def __init__(self, it: _EpochIterator, run, depth: int) -> None:
        import queue

        # Weakly: a strong reference from the thread would keep the iterator alive after the
        # loop dropped it (`break`, `next(iter(loader))`), so it would never close and the thread
        # would wait on a full queue forever, holding the native run.
        self._it = weakref.ref(it)
        self._batches = it._batches
        self._epoch = it.epoch
        self._run = run
        self._queue: "queue.Queue" = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="loadscope-map", daemon=True)
        self._thread.start()

    def get(self, timeout: float):
        import queue

        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            if not self._thread.is_alive() and self._queue.empty():
                return ("error", LoadscopeError("loadscope: the map= thread ended without a result"), -1)
            return None

    def _put(self, item) -> bool:
        import queue

        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_WAIT_MS / 1000)
                return True
            except queue.Full:
                continue
        return False

    def _log_skips(self, skipped) -> None:
        it = self._it()
        if it is not None:
            it._log_skips(skipped)
            del it

    def _work(self) -> None:
        batches = self._batches
        try:
            while not self._stop.is_set():
                b = self._run.next(_WAIT_MS)
                if isinstance(b, str):
                    continue
                if b is None:
                    it = self._it()
                    if it is not None:
                        self._log_skips(it._run_skips_after(self._run))
                    del it
                    self._put(("end", None, -1))
                    return
                if b.skipped:
                    self._log_skips(b.skipped)
                try:
                    out = batches.apply_map(batches.make(b), self._epoch, b.index)
                except Exception as e:
                    error = LoadscopeError(f"map= raised on batch {b.index} of epoch {self._epoch} "
                                           f"(first key {b.keys[0] if b.keys else '?'}): {type(e).__name__}: {e}")
                    error.__cause__ = e
                    self._put(("error", error, -1))
                    return
                if not self._put(("batch", out, b.index)):
                    return
        except BaseException as e:  # the run's own errors (SampleError, budget, ...) as they are
            self._put(("error", e, -1))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


def _close_all() -> None:
    with _live_lock:
        live = list(_live)
    for it in live:
        it.close()


def _after_fork_in_child() -> None:
    # A forked child has copies of the parent's native runs but none of their threads;
    # stopping them would wait for threads that do not exist, so they are kept, unused.
    live = False
    for it in list(_live):
        if it._run is not None:
            live = True
            _orphans.append(it._run)
            it._run = None
            it._ended_because = "was started before this process was forked; start a new iteration here"
    _live.clear()
    if live:  # oneTBB is unusable here: Note [fork during an epoch] in engine.cc
        _native._forked_during_epoch(True)


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

