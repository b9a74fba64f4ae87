"""Progress reporting for the question loop.

On a terminal: a live bar (tqdm, carriage-return frames). Anywhere else (a log file, a CI
job, a pipe): one plain line each time another ``step_percent`` (5 %) of the questions is
done, and one at the end, so logs never fill with bar frames.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class Progress:
    """``update(n)`` after each question, ``close()`` at the end (also a context manager)."""

    def __init__(self, total: int, initial: int = 0, *, enabled: bool = True,
                 stream: TextIO | None = None, desc: str = "questions",
                 step_percent: float = 5.0) -> None:
        self.total = total
        self.done = initial
        self.desc = desc
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and total > 0
        self.step = max(step_percent, 0.0) / 100.0
        self._bar: Any = None
        self._t0 = time.monotonic()
        self._next = 0
        if not self.enabled:
            return
        if _is_terminal(self.stream):
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm is a dependency
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=total, initial=initial, unit="q", desc=desc,
                                 dynamic_ncols=True, file=self.stream)
                return
        self._next = self._next_mark(initial)

    def _next_mark(self, done: int) -> int:
        """The smallest count above ``done`` that completes another step (or the total)."""
        if done >= self.total:
            return self.total + 1  # nothing left to report
        if self.step <= 0:
            return self.total
        step_n = self.total * self.step
        k = int(done // step_n) + 1 if step_n > 0 else 1
        while round(k * step_n) <= done:  # rounding may land on a count already reported
            k += 1
        return min(self.total, round(k * step_n))

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        if self.done >= self._next:
            self._line()
            self._next = self._next_mark(self.done)

    def _line(self) -> None:
        pct = 100.0 * self.done / self.total
        elapsed = time.monotonic() - self._t0
        print(f"{self.desc}: {self.done}/{self.total} ({pct:.0f}%) {elapsed:.0f}s",
              file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
