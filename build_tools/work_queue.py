"""Run many jobs in N long-lived worker processes that each pull the next job when done.

Why not multiprocessing: TVM objects crash a pool worker when its frames are torn down, and
results must not be pickled (TVM's str/int subclasses do not survive it). Here a worker is
`python -m build_tools _worker MODULE:FUNCTION`; it reads one JSON job per line on stdin,
calls FUNCTION(*args) and answers one JSON line on its stdout. Anything else the job prints
(TileLang warnings, TVM logs) goes to stderr, so it can never corrupt the protocol.

A job that raises is reported with its traceback and the worker carries on; a worker that
dies (segfault, OOM kill) is reported with the job it was running and replaced.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class Job:
    key: str  # names the job in messages ("rms_norm_bf16_any@sm_90a")
    args: list  # JSON-able arguments of the worker function
    estimate: float = 1.0  # expected seconds: the slowest jobs start first


@dataclass
class Outcome:
    key: str
    ok: bool
    seconds: float
    result: object = None
    error: str = ""


def _worker_command(target: str) -> list[str]:
    return [sys.executable, "-m", "build_tools", "_worker", target]


class _Worker:
    def __init__(self, target: str, env: dict | None):
        self.proc = subprocess.Popen(
            _worker_command(target),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.job: Job | None = None
        self.ready = False  # it imported its function: a death after this is a job's fault

    def send(self, job: Job) -> None:
        self.job = job
        try:
            self.proc.stdin.write(json.dumps({"key": job.key, "args": job.args}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # it already died: the EOF on its stdout reports the job
            pass

    def finish(self) -> None:
        """No more jobs: closing stdin ends the worker's loop."""
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()


class _Pool:
    """The parent's side: hands the next job to whichever worker answers first."""

    def __init__(self, jobs, target, on_outcome, env):
        # pop() takes the slowest; equal estimates keep the given order
        self.queue = sorted(reversed(jobs), key=lambda j: j.estimate)
        self.target, self.on_outcome, self.env = target, on_outcome, env
        self.sel = selectors.DefaultSelector()
        self.live: list[_Worker] = []

    def start(self) -> None:
        """A new worker; it gets its first job once it says it is ready. One message at a time
        in flight per worker keeps readline() from buffering a line select() would not see."""
        worker = _Worker(self.target, self.env)
        self.live.append(worker)
        self.sel.register(worker.proc.stdout, selectors.EVENT_READ, worker)

    def feed(self, worker: _Worker) -> None:
        if self.queue:
            worker.send(self.queue.pop())
        else:
            worker.finish()

    def on_reply(self, worker: _Worker, line: str) -> None:
        reply = json.loads(line)
        if reply.get("ready"):
            worker.ready = True
        else:
            job, worker.job = worker.job, None
            outcome = Outcome(job.key, reply["ok"], reply["seconds"], reply.get("result"))
            outcome.error = reply.get("error", "")
            self.on_outcome(outcome)
        self.feed(worker)

    def on_exit(self, worker: _Worker) -> None:
        """EOF: the worker ended, normally after finish(), or it died mid-job."""
        self.sel.unregister(worker.proc.stdout)
        self.live.remove(worker)
        code = worker.proc.wait()
        if worker.job is not None:  # it died running a job: report it, replace the worker
            why = f"its worker process died (exit code {code}); the output above is its last"
            self.on_outcome(Outcome(worker.job.key, False, 0.0, error=why))
            if self.queue:
                self.start()
        elif not worker.ready and not self.live:  # no worker could start: more would not help
            why = f"not run: the worker processes failed to start (exit code {code}), see above"
            while self.queue:
                self.on_outcome(Outcome(self.queue.pop().key, False, 0.0, error=why))

    def run(self, workers: int) -> None:
        try:
            for _ in range(min(max(1, workers), len(self.queue))):
                self.start()
            while self.live:
                for key, _ in self.sel.select():
                    line = key.data.proc.stdout.readline()
                    if line:
                        self.on_reply(key.data, line)
                    else:
                        self.on_exit(key.data)
        finally:
            for worker in self.live:  # interrupted (Ctrl-C), or on_outcome raised
                worker.proc.kill()
                worker.proc.wait()
            self.sel.close()


def run(
    jobs: Sequence[Job],
    target: str,
    workers: int,
    on_outcome: Callable[[Outcome], None],
    env: dict | None = None,
) -> None:
    """Run `jobs` (slowest estimate first) on `workers` processes calling `target`
    ("module:function"); `on_outcome` sees each result as it arrives."""
    _Pool(jobs, target, on_outcome, env).run(workers)


def worker_main(target: str) -> int:
    """Entry of `python -m build_tools _worker MODULE:FUNCTION`."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # from here on, fd 1 (print, C++ std::cout) is stderr
    sys.stdout = sys.stderr
    module, _, name = target.partition(":")
    function = getattr(importlib.import_module(module), name)
    protocol.write(json.dumps({"ready": True}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        job = json.loads(line)
        t0 = time.perf_counter()
        try:
            reply = {"ok": True, "result": function(*job["args"])}
        except Exception:
            reply = {"ok": False, "error": traceback.format_exc()}
        reply["seconds"] = time.perf_counter() - t0
        protocol.write(json.dumps(reply) + "\n")
        protocol.flush()
    return 0
