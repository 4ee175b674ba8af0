"""A progress line for long build steps: done/total, elapsed, ETA.

On a terminal it redraws one line in place; otherwise (pip and CMake capture the output) it
prints a plain line now and then, so a 20-minute log gets a few dozen lines, not thousands.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def format_seconds(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """`advance(weight)` after each job; the ETA scales elapsed time by the remaining
    share of the total weight (estimated seconds per job, or 1 each)."""

    def __init__(
        self,
        label: str,
        total: int,
        total_weight: float | None = None,
        stream: TextIO | None = None,
        interval: float = 30.0,
        clock=time.monotonic,
    ):
        self.label, self.total = label, total
        self.total_weight = total_weight if total_weight else float(total)
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval  # seconds between plain lines
        self.clock = clock
        self.start = clock()
        self.done, self.weight_done = 0, 0.0
        self._last_line = self.start

    def eta(self) -> float | None:
        if self.weight_done <= 0:
            return None
        elapsed = self.clock() - self.start
        return elapsed * max(0.0, self.total_weight - self.weight_done) / self.weight_done

    def line(self, note: str = "") -> str:
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = self.eta()
        text = (
            f"{self.label}: {self.done}/{self.total} ({pct:.0f}%), "
            f"{format_seconds(self.clock() - self.start)} elapsed"
        )
        if eta is not None and self.done < self.total:
            text += f", ETA {format_seconds(eta)}"
        return text + (f"  {note}" if note else "")

    def advance(self, weight: float = 1.0, note: str = "") -> None:
        self.done += 1
        self.weight_done += weight
        now = self.clock()
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.line(note))
            self.stream.flush()
        elif now - self._last_line >= self.interval or self.done == self.total:
            self._last_line = now
            print(self.line(), file=self.stream, flush=True)

    def message(self, text: str) -> None:
        """A line of its own (a failure, a warning) without tearing the progress line."""
        prefix = "\r\x1b[2K" if self.tty else ""
        print(prefix + text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
