"""The whole benchmark in one command, each measurement in its own process with a time limit.

    python bench/suite.py [--out bench/results] [--quick] [--work DIR] [--skip STEP ...]

Steps, in order: ceilings (copy, torch bf16 8192³ matmul) · kernels (bench/run.py: every op
of the build at a large and a small size, tileaot vs torch eager, gemm 8192³) · jit
(bench/jit_compare.py: TileLang's JIT of the same kernels, when tilelang is importable) · host
(bench/host_calls.py: 10,000 back-to-back calls) · launch_floor (bench/native/launch_floor.cu,
when nvcc is there) · graphs (bench/graphs.py) · cold_start (bench/cold_start.py).

While ceilings and kernels time the GPU on two CPU cores, jit_prewarm compiles the TileLang JIT
kernels on the other cores into the suite's TileLang cache, so that jit loads them instead of
compiling each in turn; without spare cores it runs on its own before jit.

Writes <out>/<gpu>-<YYYY-MM-DD>.json (every step's numbers and status, the targets judged),
.md (bench/report.py) and .png (bench/chart.py, if matplotlib imports; if not, run chart.py on
the JSON where it does). Logs of each step: --work (default: a temporary folder, removed).
`--quick` is a smoke run of every step on a few cases (about two minutes).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PY = sys.executable
BUDGET_S = 470  # the 8 minutes, less the merge and some slack
MIN_STEP_S = 15  # a step given less than this is skipped, not started and killed
MANIFEST = ROOT / "build" / "gpu" / "gen" / "manifest.json"

# name: (script, time limit in s, its arguments in a full run, in a --quick run)
STEPS = {
    "ceilings": ("bench/ceilings.py", 90, [], []),
    "kernels": ("bench/run.py", 200, [], ["--match", "^(rms_norm|gemm)"]),
    "jit_prewarm": ("bench/jit_prewarm.py", 300, [], ["--match", "rms_norm_bf16*"]),
    "jit": ("bench/jit_compare.py", 200, [], ["--match", "^rms_norm"]),
    "host": ("bench/host_calls.py", 90, [], ["--calls", "1000", "--bursts", "3"]),
    "graphs": ("bench/graphs.py", 60, [], ["--iters", "100"]),
    "cold_start": ("bench/cold_start.py", 200, ["--repeats", "3"], ["--repeats", "1"]),
}


@dataclass
class Running:
    name: str
    proc: subprocess.Popen
    log: IO[str]
    started: float


class Runner:
    """Runs steps as child processes within the suite's time budget; records their status."""

    def __init__(self, work: Path, env: dict, budget_s: float, quick: bool):
        self.work, self.env, self.quick = work, env, quick
        self.deadline = time.monotonic() + budget_s
        self.steps: dict[str, dict] = {}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def skip(self, name: str, note: str) -> None:
        self.steps[name] = {"status": "skipped", "note": note}

    def argv(self, name: str, extra: list[str]) -> list[str]:
        script, _, full, quick = STEPS[name]
        return [PY, script, *(quick if self.quick else full), *extra, "--json", self.json(name)]

    def json(self, name: str) -> str:
        return str(self.work / f"{name}.json")

    def start(self, name: str, argv: list[str], cores: list[int] | None) -> Running:
        log = open(self.work / f"{name}.log", "w")  # closed in finish()

        def pin() -> None:
            if cores:
                os.sched_setaffinity(0, cores)

        print(f"[suite] {name}: {' '.join(argv)}", flush=True)
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout ends its children too
            preexec_fn=pin,
        )
        return Running(name, proc, log, time.monotonic())

    def finish(self, step: Running, limit_s: float) -> dict | None:
        """Waits for the step until its limit; records its status; returns its JSON, if any."""
        timeout = max(0.0, min(limit_s - (time.monotonic() - step.started), self.left()))
        try:
            rc = step.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(step.proc.pid, signal.SIGKILL)  # the group this step started
            step.proc.wait()
            rc = None
        step.log.close()
        seconds = time.monotonic() - step.started
        path = Path(self.json(step.name))
        data = json.loads(path.read_text()) if path.exists() else None
        status = "ok" if rc == 0 and data is not None else "timeout" if rc is None else "failed"
        record = {"status": status, "seconds": round(seconds, 1), "limit_s": round(limit_s)}
        if status != "ok":
            record["note"] = _tail(Path(step.log.name))
        self.steps[step.name] = record
        print(f"[suite] {step.name}: {status} in {seconds:.0f} s", flush=True)
        return data

    def run(self, name: str, extra: Sequence[str] = (), cores: list[int] | None = None):
        limit = STEPS[name][1]
        if self.left() < MIN_STEP_S:
            self.skip(name, "the suite's time budget (--budget) was spent before this step")
            return None
        return self.finish(self.start(name, self.argv(name, list(extra)), cores), limit)


def _tail(log: Path, chars: int = 300) -> str:
    """The log's last line: the exception of a failed step, the last progress of a slow one."""
    lines = log.read_text(errors="replace").strip().splitlines()
    return lines[-1][-chars:] if lines else "(no output)"


def launch_floor(runner: Runner) -> dict | None:
    """Compiles and runs bench/native/launch_floor.cu: the driver's own cost of one launch."""
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = shutil.which("nvcc") or shutil.which(f"{cuda_home}/bin/nvcc")
    if not nvcc:
        runner.skip("launch_floor", "no nvcc on PATH or in $CUDA_HOME/bin")
        return None
    exe = str(runner.work / "launch_floor")
    # The toolkit's stub libcuda.so links where only the driver's libcuda.so.1 is installed (a
    # container); at run time the loader still finds the driver's own by that soname.
    stubs = [
        f"-L{Path(nvcc).resolve().parents[1] / 'lib64' / 'stubs'}",
        f"-L{cuda_home}/lib64/stubs",
    ]
    build = [nvcc, "-O2", "-o", exe, "bench/native/launch_floor.cu", *stubs, "-lcuda"]
    if runner.left() < MIN_STEP_S:
        runner.skip("launch_floor", "the suite's time budget (--budget) was spent before this step")
        return None
    started = time.monotonic()
    try:
        out = subprocess.run(build, cwd=ROOT, capture_output=True, text=True, timeout=120)
        if out.returncode == 0:
            out = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        note = " / ".join((out.stderr or out.stdout).strip().splitlines()[-3:])[-300:]
    except subprocess.TimeoutExpired as exc:
        out, note = None, f"{' '.join(exc.cmd)} ran past {exc.timeout} s"
    seconds = round(time.monotonic() - started, 1)
    if out is None or out.returncode != 0:
        runner.steps["launch_floor"] = {"status": "failed", "seconds": seconds, "note": note}
        return None
    runner.steps["launch_floor"] = {"status": "ok", "seconds": seconds}
    return json.loads(out.stdout.strip().splitlines()[-1])


def merge_kernels(run: dict | None, jit: dict | None) -> list[dict]:
    """run.py's rows (failed cases last), each with jit_compare's row of the same case."""
    run = run or {}
    rows = [dict(r) for r in run.get("rows", [])]
    seen: dict[tuple[str, str], int] = {}
    index = {}
    for i, row in enumerate(rows):  # a label and size may repeat: pair them by occurrence
        key = (row["op"], row["size"])
        index[(*key, seen.get(key, 0))] = i
        seen[key] = seen.get(key, 0) + 1
    seen.clear()
    for jrow in (jit or {}).get("kernels", []):
        key = (jrow["op"], jrow["size"])
        i = index.get((*key, seen.get(key, 0)))
        seen[key] = seen.get(key, 0) + 1
        if i is None:
            continue
        if "error" in jrow:
            rows[i]["jit_error"] = jrow["error"]
        else:
            rows[i] |= {
                "tilelang_jit_us": jrow["tilelang_jit_us"],
                "jit_tileaot_us": jrow["tileaot_us"],
                "bit_identical": jrow["bit_identical"],
                "jit_variants": jrow["variants"],
            }
    return rows + [dict(f) for f in run.get("failed", [])]


def _output(*argv: str) -> str | None:
    try:
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def machine(ceilings: dict | None) -> dict:
    facts = {k: (ceilings or {}).get(k) for k in ("gpu", "capability", "torch", "cuda")}
    commit = _output("git", "rev-parse", "--short", "HEAD")
    if commit and _output("git", "status", "--porcelain"):
        commit += " with uncommitted changes"
    smi = _output(
        "nvidia-smi",
        "--query-gpu=name,driver_version,clocks.sm,clocks.mem",
        "--format=csv,noheader",
    )
    return facts | {
        "python": platform.python_version(),
        "tilelang": _version("tilelang"),
        "tileaot": _version("tileaot"),
        "commit": commit,
        "nvidia_smi": smi,
    }


def gpu_slug(name: str | None) -> str:
    """'NVIDIA H200' → 'h200': the file name's GPU part."""
    words = (name or "").replace("NVIDIA", "").split()
    return re.sub(r"[^a-z0-9]+", "-", words[0].lower()) if words else "gpu"


def jit_unavailable() -> str | None:
    """Why TileLang's JIT cannot be compared here, or None if it can."""
    if importlib.util.find_spec("tilelang") is None:
        return (
            "tilelang is not importable (a build-time dependency, absent from the GPU image): "
            "`bash scripts/gpu_check.sh suite` puts the carried copy on PYTHONPATH"
        )
    if not MANIFEST.exists():
        return f"no {MANIFEST.relative_to(ROOT)} (the GPU check's build): run the GPU check first"
    return None


def split_cores() -> tuple[list[int] | None, list[int] | None]:
    """(cores for timing, cores for the background compile), or (None, None): too few to split."""
    cores = sorted(os.sched_getaffinity(0))
    return (cores[:2], cores[2:]) if len(cores) >= 6 else (None, None)


def measure_all(runner: Runner, skip: set[str]) -> dict:
    """Runs every step not in `skip`; returns their numbers by step."""
    no_jit = jit_unavailable()
    if no_jit:
        for name in ("jit_prewarm", "jit"):
            runner.skip(name, no_jit)
    timing_cores, compile_cores = split_cores()
    prewarm = None
    if not no_jit and "jit_prewarm" not in skip and compile_cores:
        workers = ["--workers", str(len(compile_cores))]
        prewarm = runner.start("jit_prewarm", runner.argv("jit_prewarm", workers), compile_cores)
    out: dict = {}
    try:
        for name in ("ceilings", "kernels"):
            if name not in skip:
                out[name] = runner.run(name, cores=timing_cores)
    except BaseException:  # Ctrl-C included: the compilers in the background are ours to end
        if prewarm is not None:
            os.killpg(prewarm.proc.pid, signal.SIGKILL)
        raise
    if prewarm is not None:
        runner.finish(prewarm, STEPS["jit_prewarm"][1])
    elif not no_jit and "jit_prewarm" not in skip:
        runner.run("jit_prewarm")
    tilelang = [] if no_jit else ["--tilelang"]
    if not no_jit and "jit" not in skip:
        out["jit"] = runner.run("jit")
    if "host" not in skip:
        out["host"] = runner.run("host", tilelang)
    out["launch_floor"] = None if "launch_floor" in skip else launch_floor(runner)
    if "graphs" not in skip:
        out["graphs"] = runner.run("graphs")
    if "cold_start" not in skip:
        out["cold_start"] = runner.run("cold_start", tilelang)
    for name in skip:
        runner.skip(name, "--skip")
    return out


def assemble(out: dict, runner: Runner, started: float, date: str, command: str) -> dict:
    from targets import evaluate

    host = out.get("host")
    if host is not None and out.get("launch_floor"):
        host["launch_floor"] = out["launch_floor"]
    result = {
        "schema": 1,
        "date": date,
        "suite": {
            "command": command,
            "quick": runner.quick,
            "elapsed_s": round(time.monotonic() - started, 1),
        },
        "machine": machine(out.get("ceilings")),
        "steps": runner.steps,
        "ceilings": out.get("ceilings"),
        "kernels": merge_kernels(out.get("kernels"), out.get("jit")),
        "jit_host": (out.get("jit") or {}).get("host"),
        "host": host,
        "cold_start": out.get("cold_start"),
        "graphs": out.get("graphs"),
    }
    result["targets"] = evaluate(result)
    return result


def write(result: dict, out_dir: Path) -> Path:
    """<gpu>-<date>.json, .md and, where matplotlib imports, .png; returns the JSON's path."""
    from report import render

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{gpu_slug(result['machine'].get('gpu'))}-{result['date']}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    chart = None
    if importlib.util.find_spec("matplotlib") is None:
        print(f"[suite] no matplotlib here: run `python bench/chart.py {stem}.json` elsewhere")
        chart = stem.with_suffix(".png").name  # linked now, drawn there
    elif result.get("ceilings") and result["kernels"]:
        from chart import draw

        try:
            chart = draw(result, stem.with_suffix(".png")).name
        except Exception as exc:  # the JSON and the tables are worth more than the picture
            print(f"[suite] chart failed ({type(exc).__name__}: {exc}); the JSON is written")
    stem.with_suffix(".md").write_text(render(result, chart))
    return stem.with_suffix(".json")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(BENCH / "results"), help="where results go")
    parser.add_argument("--quick", action="store_true", help="smoke run: a few cases each")
    parser.add_argument("--work", help="keep each step's log and JSON here (default: temporary)")
    parser.add_argument("--skip", nargs="*", default=[], choices=[*STEPS, "launch_floor"])
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for all steps")
    args = parser.parse_args()
    started = time.monotonic()
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    with tempfile.TemporaryDirectory(prefix="tileaot-suite-") as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        # One TileLang cache for the prewarm, jit and host steps (cold start makes its own),
        # kept out of --work: the GPU flow copies that folder back.
        env = dict(os.environ)
        env.setdefault("TILELANG_CACHE_DIR", str(Path(tmp) / "tilelang-cache"))
        runner = Runner(work, env, args.budget, args.quick)
        out = measure_all(runner, set(args.skip))
        command = " ".join(["python", "bench/suite.py", *sys.argv[1:]])
        result = assemble(out, runner, started, date, command)
    path = write(result, Path(args.out))
    for t in result["targets"]:
        print(f"[suite] {t['target']}: {t['measured']} ({t['met']})")
    print(f"[suite] wrote {path} and {path.with_suffix('.md')} in {result['suite']['elapsed_s']} s")
    return 0 if all(s["status"] != "failed" for s in result["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
