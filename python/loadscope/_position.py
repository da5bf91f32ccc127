"""``Position``: where a loader stands — the epoch its next iteration uses, the resume point,
the open iteration's progress and the last epoch's counters. The Loader owns one; the epoch's
iterator reports to it through its methods (Note [state after a loop] in _loader.py)."""

from __future__ import annotations

import weakref
from typing import Any, Dict, Optional, Tuple


class Position:
    def __init__(self, epoch: int = 0, epoch_set: bool = False, resume: int = 0) -> None:
        self.epoch = epoch            # the epoch the next iteration uses
        self.epoch_set = epoch_set    # chosen by set_epoch / a loaded state, not counted up
        self.resume = resume          # batches of `epoch` already consumed (load_state_dict)
        self._open: Optional[Dict[str, int]] = None  # {epoch, batches} of the open iteration
        self._active: Optional[weakref.ref] = None   # that iteration, while it lives
        self.last_stats: Dict[str, Any] = {}

    def set_epoch(self, epoch: int) -> Optional[int]:
        """Sets the next epoch; returns the resume point it drops (another epoch's), if any."""
        dropped = self.resume if self.resume and epoch != self.epoch else None
        if dropped is not None:
            self.resume = 0
        self.epoch, self.epoch_set = epoch, True
        return dropped

    def load(self, epoch: int, epoch_set: bool, batches: int) -> None:
        """A saved state: the next iteration is `epoch` from its batch `batches`. An open
        iteration is ended (its next() says why)."""
        self.supersede()  # first: what the ended iteration leaves is overwritten by the state
        self.epoch, self.epoch_set, self.resume, self._open = epoch, epoch_set, batches, None

    def next_epoch(self) -> Tuple[int, int]:
        """Ends the open iteration (a loader runs one epoch at a time) and says where the next
        one starts: its epoch and resume point."""
        self.supersede()
        return self.epoch, self.resume

    def started(self, epoch: int, resume: int, iteration: Any) -> None:
        """That iteration is running: the one after it uses the following epoch."""
        self.resume, self.epoch = 0, epoch + 1
        self._open = {"epoch": epoch, "batches": resume}
        self._active = weakref.ref(iteration)

    def supersede(self) -> None:
        it = self.active()
        if it is not None:
            it._supersede()

    def active(self) -> Any:
        return self._active() if self._active is not None else None

    def delivered(self, epoch: int, batches: int) -> None:
        if self._open is not None and self._open["epoch"] == epoch:
            self._open["batches"] = batches

    def closed(self, epoch: int, start: int, gave_nothing: bool, stats: Dict[str, Any]) -> None:
        """The iteration of `epoch` ended (its end, break, close(), an exception): the saved
        state becomes the next epoch's start — unless it gave nothing and no other iteration
        began since, which leaves its epoch unused (Note [an iteration that gave nothing])."""
        if self._open is not None and self._open["epoch"] == epoch:
            self._open = None
        if gave_nothing and self.epoch == epoch + 1:
            self.epoch, self.resume = epoch, start
        self.last_stats = stats

    def saved(self) -> Tuple[int, int]:
        """(epoch, batches) a state_dict records: the open iteration's epoch and the batches it
        handed out; with none open, the next epoch (or a loaded, unused resume point)."""
        if self._open is not None:
            return self._open["epoch"], self._open["batches"]
        return self.epoch, self.resume
