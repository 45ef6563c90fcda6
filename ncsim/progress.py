"""Progress bars on stderr for the long steps of a command: assembling, timing, computing values.

    from ncsim.progress import Progress
    with Progress(len(lines), "assembling k.s", unit="line") as bar:   # total=None: no bar, the time so far
        for line in lines:
            ...
            bar.update()          # or bar.set(done)

A bar appears only once its step has taken `delay` seconds (2 by default; the environment variable
NCSIM_PROGRESS_DELAY sets another), is drawn by tqdm on stderr, and is erased when the step ends,
so a quick step prints nothing. Bars are off unless the `ncsim` command turned them on (`enable_bars`):
calling ncsim from Python never draws one, and neither does a command whose stderr is not a
terminal or that was given --quiet. A Progress that is off costs one attribute test per update.

`write(message)` prints a line to stderr without breaking a bar that is showing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self, TextIO

DEFAULT_DELAY = 2.0  # seconds a step runs before its bar appears
TICK = 0.25  # seconds between redraws of a bar whose count does not move (its clock does)

_show = False  # set by the command line (`enable_bars`); off when ncsim is used from Python
_active: list[Progress] = []  # the bars on screen now


def delay_seconds() -> float:
    """How long a step runs before its bar appears: NCSIM_PROGRESS_DELAY, else 2 s."""
    text = os.environ.get("NCSIM_PROGRESS_DELAY", "")
    try:
        return max(0.0, float(text)) if text else DEFAULT_DELAY
    except ValueError:
        return DEFAULT_DELAY


def bars_enabled(stream: TextIO | None = None) -> bool:
    """Whether bars are drawn now: the command turned them on and `stream` (stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return _show and stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@contextmanager
def enable_bars(show: bool) -> Iterator[None]:
    """Within the block, draw bars (when stderr is a terminal) if `show`; the command line's switch."""
    global _show
    before, _show = _show, show
    try:
        yield
    finally:
        _show = before


def write(message: str, stream: TextIO | None = None) -> None:
    """Print `message` and a newline on stderr, above any bar that is showing."""
    stream = sys.stderr if stream is None else stream
    if any(p._bar is not None for p in _active):
        from tqdm import tqdm

        tqdm.write(message, file=stream)
    else:
        stream.write(message + "\n")
        stream.flush()


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


class Progress:
    """One step's bar. total: the count at the end (None: unknown, the bar shows the time so far);
    desc: what the step does; unit: what is counted. enabled: None for the command's setting and
    stderr being a terminal; delay: None for `delay_seconds()`. Use as a context manager, or call
    close()."""

    def __init__(self, total: int | None, desc: str, *, unit: str = "", enabled: bool | None = None,
                 delay: float | None = None, stream: TextIO | None = None):
        self.total = total
        self.desc = desc
        self.unit = unit
        self.n = 0
        self.stream = sys.stderr if stream is None else stream
        self.enabled = bars_enabled(self.stream) if enabled is None else enabled
        self.delay = delay_seconds() if delay is None else delay
        self.start = time.monotonic()
        self._bar: Any = None  # the tqdm bar, made once the delay has passed
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if not self.enabled:
            return
        _active.append(self)
        if self.delay <= 0:
            self._draw()
        # A thread draws the bar when the delay passes and keeps its clock going between updates
        # (a step may update rarely, or never: assembling, timing).
        self._ticker = threading.Thread(target=self._tick, name="ncsim-progress", daemon=True)
        self._ticker.start()

    def update(self, n: int = 1) -> None:
        """Count `n` more done."""
        if not self.enabled:
            return
        self.n += n
        bar = self._bar
        if bar is not None:
            bar.update(n)
        elif time.monotonic() - self.start >= self.delay:
            self._draw()

    def set(self, done: int) -> None:
        """Set the count done so far."""
        if self.enabled:
            self.update(done - self.n)

    def close(self) -> None:
        """End the step: erase its bar, if it was drawn."""
        if not self.enabled:
            return
        self.enabled = False
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join()
        with self._lock:
            if self._bar is not None:
                self._bar.close()
        if self in _active:
            _active.remove(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ drawing
    def _draw(self) -> None:
        """Make the tqdm bar (it draws itself at once), its clock started when the step did."""
        with self._lock:
            if self._bar is not None or self._stop.is_set():
                return
            from tqdm import tqdm

            class _Bar(tqdm):
                monitor_interval = 0  # no tqdm monitor thread: our ticker redraws

            fmt = None if self.total is not None else "{desc}: {elapsed}{postfix}"
            # A terminal that gives no size (a bare pty) gets 80 x 24 rather than no bar.
            sized = _columns(self.stream) > 0
            self._bar = _Bar(total=self.total, desc=self.desc, initial=self.n,
                             unit=f" {self.unit}" if self.unit else "it",
                             unit_scale=self.total is not None and self.total >= 10_000, leave=False,
                             file=self.stream, dynamic_ncols=sized, ncols=None if sized else 80, nrows=None if sized else 24,
                             mininterval=TICK, miniters=0, bar_format=fmt, delay=0)
            self._bar.start_t -= time.monotonic() - self.start  # tqdm's clock is time.time
            self._bar.refresh()

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            if self._bar is None:
                if time.monotonic() - self.start >= self.delay:
                    self._draw()
            else:
                with self._lock:
                    if self._bar is not None and not self._stop.is_set():
                        self._bar.refresh()
