"""A progress line for long build steps: done/total, elapsed, ETA.

On a terminal it redraws one line in place; otherwise (pip and CMake capture the output) it
prints a plain line now and then, so a 20-minute log gets a few dozen lines, not thousands.

`pip wheel` hides the build backend's output until it ends, so with $TILEAOT_PROGRESS_FILE
set (scripts/build_wheel.sh sets it) the progress lines also go to that file, which
`python -m build_tools watch` prints as they come: tracing's lines, then one "compiled" line per
cubin that `compile` writes (build_tools/watch.py turns them into done/total and an ETA).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

PROGRESS_ENV = "TILEAOT_PROGRESS_FILE"
FILE_INTERVAL = 5.0  # seconds between progress lines written to $TILEAOT_PROGRESS_FILE


def append_note(line: str) -> None:
    """Append one line to $TILEAOT_PROGRESS_FILE, if set (one write: O_APPEND keeps lines whole
    when parallel compiles write at once). Never fails the build."""
    path = os.environ.get(PROGRESS_ENV)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line.rstrip("\n") + "\n")
    except OSError:
        pass


note = append_note  # what other modules call; Progress uses append_note (advance has `note`)


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
        self._last_line = self._last_note = self.start
        append_note(self.line())

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
        if now - self._last_note >= FILE_INTERVAL or self.done == self.total:
            self._last_note = now
            append_note(self.line())

    def message(self, text: str) -> None:
        """A line of its own (a failure, a warning) without tearing the progress line."""
        prefix = "\r\x1b[2K" if self.tty else ""
        print(prefix + text, file=self.stream, flush=True)
        append_note(text)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
