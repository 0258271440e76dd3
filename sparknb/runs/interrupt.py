"""Ctrl-C during a notebook's run: the kernel is interrupted, never torn down under a cell, and a run whose
requests are all taken finishes its analysis first.

Without this, papermill's client took the KeyboardInterrupt itself and shut the kernel down while its cell was
still answering: the kernel printed a ZMQ traceback ('Socket operation on non-socket') and the study recorded
'KeyboardInterrupt: ' as its reason. Here the first Ctrl-C goes to the kernel as an interrupt (the signal
Jupyter sends), so the cell ends the way a failure does: the study seals what it took, with the reason
"interrupted (Ctrl-C)". Where the study has already said that its last request is recorded (`measured`),
the first Ctrl-C waits for the analysis instead, a few seconds of tables, and the run is sealed whole. A
second Ctrl-C stops at once.

A kernel runs a Ctrl-C only inside a cell. Sent to one still starting, it killed it half-imported ("Fatal Python
error: init_import_site", then nbclient's "Kernel died before replying to kernel_info", and a campaign ended in
that traceback, not interrupted), or was dropped (ipykernel ignores SIGINT between cells: the run went on). So
outside a cell the Ctrl-C is kept, and the next cell is refused before it starts (`cell_start`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

REASON = "interrupted (Ctrl-C)"
MEASURED = "SPARKNB_MEASURED"  # a file the study creates once every request is recorded (see `measured`)


def measured() -> None:
    """Called by a study once its last request is recorded: a Ctrl-C from now on lets the analysis finish."""
    path = os.environ.get(MEASURED)
    if path:
        Path(path).touch()


class Stop:
    """What the Ctrl-Cs during one run asked for: `asked` (any), `after_measuring` (the analysis was let finish).
    `kernel_class` is the kernel manager papermill is to use, so that the kernel to interrupt is known."""

    def __init__(self) -> None:
        from jupyter_client import AsyncKernelManager

        self.kernel = self.process = None  # the kernel's manager, and its process (how it ended, if it died)
        self.marker = Path(tempfile.mkdtemp(prefix="sparknb-run-")) / "measured"
        self.asked = self.after_measuring = self.in_cell = False
        stop = self

        class Watched(AsyncKernelManager):
            def __init__(self, **kwargs) -> None:
                super().__init__(**kwargs)
                stop.kernel = self

            async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
                await super()._async_launch_kernel(kernel_cmd, **kw)
                stop.process = self.provisioner.process  # kept: the provisioner forgets it once the kernel is gone

        self.kernel_class = Watched

    def __call__(self, signum, frame) -> None:
        pgid = getattr(getattr(self.kernel, "provisioner", None), "pgid", None)
        if self.asked or pgid is None:  # a second Ctrl-C, or no kernel yet: stop here and now
            _remember(signum, frame)
        self.asked = True
        if self.marker.exists():
            self.after_measuring = True
            print("Ctrl-C: every request is recorded; the analysis finishes first (Ctrl-C again to stop at once).",
                  file=sys.stderr, flush=True)
            return
        if self.in_cell:  # as Jupyter interrupts a kernel: its cell raises KeyboardInterrupt
            os.killpg(pgid, signal.SIGINT)

    def cell_start(self, **_) -> None:
        """nbclient's `on_cell_start` hook, run where the kernel is idle: a Ctrl-C it was not sent (it came while
        the kernel started, or between cells) stops the run here, and the kernel is shut down as after a run."""
        self.in_cell = False
        if self.asked and not self.after_measuring:
            raise KeyboardInterrupt
        self.in_cell = True


@contextlib.contextmanager
def handled() -> Iterator[Stop]:
    """Around one papermill run (in the main thread; elsewhere Ctrl-C is not this thread's to take)."""
    stop = Stop()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, stop) if main else None
    os.environ[MEASURED] = str(stop.marker)
    try:
        yield stop
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
        os.environ.pop(MEASURED, None)
        stop.marker.unlink(missing_ok=True)
        stop.marker.parent.rmdir()


_SWALLOWED = threading.Event()  # a Ctrl-C these handlers raised: SIGINT is the process's, so this is too


def _remember(signum, frame) -> None:
    _SWALLOWED.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def remembered() -> Iterator[None]:
    """Around a sequence of runs (a campaign), in the main thread: Ctrl-C raises at once, as Python's own handler
    does, and is remembered for `check`, because Python drops an exception raised inside its fork hooks. Seen: a
    Ctrl-C that landed while a campaign started its next server printed "Exception ignored in: <function
    _releaseLock>", and the campaign went on to finish."""
    _SWALLOWED.clear()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _remember) if main else None
    try:
        yield
    finally:
        _SWALLOWED.clear()
        if main:
            signal.signal(signal.SIGINT, previous)


def check() -> None:
    """Raise a Ctrl-C that a fork swallowed inside remembered(); called where work is about to start."""
    if _SWALLOWED.is_set():
        raise KeyboardInterrupt
