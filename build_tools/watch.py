"""`python -m build_tools watch FILE`: print a build's progress while `pip wheel` hides it.

pip runs the build backend with its output captured (a spinner, "still running...", until the
end). scripts/build_wheel.sh therefore sets $TILEAOT_PROGRESS_FILE for the build and runs this
beside pip: tracing's progress lines (build_tools/progress.py) are printed as they arrive, and
the one "compiled <cubin>" line per cubin that `build_tools compile` appends becomes
"compiling: done/total (pct), elapsed, ETA" every few seconds ("compile-total N" comes from
`generate`). It stops when the file says "end" or the process `--pid` exits.

`python -m build_tools watch --summary BUILD_ROOT`: the summary line of the newest
BUILD_ROOT/*/report.json (what `build_tools report` printed inside the hidden output).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from build_tools.progress import format_seconds

POLL = 1.0  # seconds between reads of the file
COMPILE_INTERVAL = 10.0  # seconds between "compiling" lines


class Watcher:
    """Turns the progress file's lines into what to print (testable without a build)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.total: int | None = None
        self.compiled = 0
        self.started: float | None = None
        self.last_print: float | None = None

    def feed(self, line: str) -> list[str]:
        line = line.rstrip("\n")
        if line.startswith("compile-total "):
            self.total = int(line.split()[1])
            return []
        if line.startswith("compiled "):
            now = self.clock()
            if self.started is None:
                self.started = now
            self.compiled += 1
            done = self.total is not None and self.compiled >= self.total
            due = self.last_print is None or now - self.last_print >= COMPILE_INTERVAL
            if done or due:
                self.last_print = now
                return [self.compile_line()]
            return []
        return [line] if line and line != "end" else []

    def compile_line(self) -> str:
        """Progress.line's format (no Progress here: its notes would go back into the file)."""
        started = self.clock() if self.started is None else self.started
        elapsed = self.clock() - started
        if not self.total:
            return f"compiling: {self.compiled} cubins, {format_seconds(elapsed)} elapsed"
        done = min(self.compiled, self.total)
        text = (
            f"compiling: {done}/{self.total} ({100.0 * done / self.total:.0f}%), "
            f"{format_seconds(elapsed)} elapsed"
        )
        if 0 < done < self.total and elapsed > 0:  # no ETA from a first, instant line
            text += f", ETA {format_seconds(elapsed * (self.total - done) / done)}"
        return text


def watch(path: Path, pid: int | None, out=sys.stdout) -> int:
    watcher, offset = Watcher(), 0
    while True:
        text = ""
        if path.exists():
            with open(path, encoding="utf-8", errors="replace") as f:
                f.seek(offset)
                text = f.read()
            cut = text.rfind("\n") + 1  # whole lines only
            text, offset = text[:cut], offset + cut
        for line in text.splitlines():
            for shown in watcher.feed(line):
                print(f"[tileaot] {shown}", file=out, flush=True)
            if line == "end":
                return 0
        if pid is not None and not _alive(pid):
            return 0
        time.sleep(POLL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def summary(build_root: Path) -> str | None:
    """The report summary of the newest build under build_root, or None if there is none."""
    reports = sorted(build_root.glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    if not reports:
        return None
    from build_tools.report import summary_line

    report = json.loads(reports[-1].read_text())
    return summary_line(report, reports[-1].with_suffix(".md"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_tools watch", description=__doc__)
    parser.add_argument("file", nargs="?", type=Path, help="the $TILEAOT_PROGRESS_FILE")
    parser.add_argument("--pid", type=int, help="stop when this process exits")
    parser.add_argument("--summary", type=Path, metavar="BUILD_ROOT", help="print a summary")
    args = parser.parse_args(argv)
    if args.summary is not None:
        line = summary(args.summary)
        if line is None:
            print(f"error: no build report under {args.summary}/*/", file=sys.stderr)
            return 1
        print(line)
        return 0
    if args.file is None:
        parser.error("give the progress file (or --summary BUILD_ROOT)")
    return watch(args.file, args.pid)
