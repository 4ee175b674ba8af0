"""Building at scale: the work queue, progress, the build cache, sharding, the build report.

All CPU and fast: fake worker functions (below), fake cubins (tiny ELF files), the toy specs
(tests/toy_specs.py) for the one end-to-end shard test.
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from build_tools import compile as compile_mod
from build_tools import merge, report, shard, work_queue
from build_tools.cache import Cache, cache_dir, module_digest
from build_tools.progress import Progress
from build_tools.tracing import estimate

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
HERE = "test_build_scale"  # workers import this module for the functions below


# ---- functions the work-queue tests run in worker processes ---------------------------------


def job_square(x):
    print("noise on stdout must not break the protocol")
    return x * x


def job_fail(x):
    raise ValueError(f"bad input {x}")


def job_die(code):
    os._exit(code)


def job_pid(seconds):
    time.sleep(seconds)
    return os.getpid()


def _run(jobs, target, workers=1):
    outcomes = []
    work_queue.run(jobs, f"{HERE}:{target}", workers, outcomes.append, env=ENV)
    return outcomes


# ---- work queue -------------------------------------------------------------------------------


def test_queue_runs_slowest_first_and_returns_results():
    jobs = [work_queue.Job(f"j{i}", [i], estimate=e) for i, e in enumerate([1, 5, 3, 5])]
    outcomes = _run(jobs, "job_square")
    # One worker: outcomes arrive in start order, slowest estimate first, ties as given.
    assert [o.key for o in outcomes] == ["j1", "j3", "j2", "j0"]
    assert all(o.ok for o in outcomes)
    assert {o.key: o.result for o in outcomes} == {"j0": 0, "j1": 1, "j2": 4, "j3": 9}


def test_queue_reports_each_failing_job_with_its_traceback_and_goes_on():
    jobs = [work_queue.Job("first", [7]), work_queue.Job("second", [3])]
    outcomes = {o.key: o for o in _run(jobs, "job_fail")}
    assert not outcomes["first"].ok and not outcomes["second"].ok  # one worker ran both
    assert "Traceback" in outcomes["first"].error
    assert "ValueError: bad input 7" in outcomes["first"].error
    assert "ValueError: bad input 3" in outcomes["second"].error


def test_queue_survives_a_dying_worker():
    jobs = [work_queue.Job("dies", [3], estimate=9), work_queue.Job("after", [0])]
    outcomes = _run(jobs, "job_die")
    assert [o.key for o in outcomes] == ["dies", "after"]
    assert not outcomes[0].ok and "exit code 3" in outcomes[0].error
    # The replacement worker ran the next job, which exits 0 mid-job: also reported.
    assert not outcomes[1].ok and "exit code 0" in outcomes[1].error


def test_queue_gives_up_when_no_worker_can_start():
    jobs = [work_queue.Job(f"j{i}", [i]) for i in range(5)]
    outcomes = []
    work_queue.run(jobs, "no_such_module_xyz:f", 2, outcomes.append, env=ENV)
    assert sorted(o.key for o in outcomes) == [f"j{i}" for i in range(5)]  # each once
    assert all(not o.ok and "failed to start" in o.error for o in outcomes)


def test_queue_workers_pull_jobs_so_a_slow_job_does_not_hold_others():
    slow = work_queue.Job("slow", [1.0], estimate=10)
    quick = [work_queue.Job(f"q{i}", [0.0]) for i in range(6)]
    outcomes = {o.key: o.result for o in _run([slow, *quick], "job_pid", workers=2)}
    # Static chunks would give the slow worker half the quick jobs; pulling gives it none,
    # unless its partner was slower still to start.
    on_slow = sum(outcomes[q.key] == outcomes["slow"] for q in quick)
    assert on_slow <= 1


# ---- progress ---------------------------------------------------------------------------------


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_prints_few_plain_lines_with_an_eta_when_not_a_tty():
    out, clock = io.StringIO(), _Clock()
    progress = Progress("tracing", 4, total_weight=10.0, stream=out, interval=30, clock=clock)
    clock.now = 10
    progress.advance(2.0)  # before the interval: silent
    assert out.getvalue() == ""
    clock.now = 40
    progress.advance(3.0)  # 5 of 10 weight done in 40 s: 40 s to go
    assert out.getvalue() == "tracing: 2/4 (50%), 40s elapsed, ETA 40s\n"
    clock.now = 41
    progress.advance(1.0)
    clock.now = 42
    progress.advance(4.0)  # the last one always prints
    lines = out.getvalue().splitlines()
    assert lines[-1] == "tracing: 4/4 (100%), 42s elapsed" and len(lines) == 2


def test_progress_redraws_one_line_on_a_tty():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    progress = Progress("compiling", 2, stream=out, clock=_Clock())
    progress.advance(note="a")
    progress.advance(note="b")
    progress.close()
    assert out.getvalue().count("\r") == 2 and out.getvalue().endswith("b\n")


# ---- cache ------------------------------------------------------------------------------------


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEAOT_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("TILEAOT_CACHE_DIR")
    assert cache_dir() == tmp_path / "xdg" / "tileaot"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "tileaot"


def test_cache_round_trips_and_treats_a_torn_entry_as_a_miss(tmp_path):
    cache = Cache(tmp_path)
    assert cache.get_json("trace", "ab12") is None
    cache.put_json("trace", "ab12", {"x": 1})
    assert cache.get_json("trace", "ab12") == {"x": 1}
    (tmp_path / "trace" / "ab" / "ab12.json").write_text('{"x": ')
    assert cache.get_json("trace", "ab12") is None
    cache.add_timings({"a@sm_80": 2.0})
    cache.add_timings({"b@sm_80": 1.0})
    assert cache.timings() == {"a@sm_80": 2.0, "b@sm_80": 1.0}


def _write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_editing_one_kernel_changes_only_its_own_cache_keys(monkeypatch, tmp_path):
    pkg = "scale_kernels_t1"
    _write_package(
        tmp_path,
        {
            f"{pkg}/__init__.py": "",
            f"{pkg}/util.py": "SIZE = 1\n",
            f"{pkg}/a.py": "from .util import SIZE\n",
            f"{pkg}/b.py": "def factory():\n    from . import util\n",
            f"{pkg}/c.py": "import json\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    def digests():  # the package is outside the source tree: its own tree is followed
        module_digest.cache_clear()
        return {m: module_digest(f"{pkg}.{m}") for m in "abc"}

    before = digests()
    (tmp_path / pkg / "c.py").write_text("# a comment\n\nimport json  # formatting only\n")
    assert digests() == before
    (tmp_path / pkg / "a.py").write_text("from .util import SIZE\nX = 2\n")
    after_a = digests()
    assert [m for m in "abc" if after_a[m] != before[m]] == ["a"]
    (tmp_path / pkg / "util.py").write_text("SIZE = 2\n")  # imported by a and (lazily) b
    after_util = digests()
    assert [m for m in "abc" if after_util[m] != after_a[m]] == ["a", "b"]


def test_estimates_fall_back_from_variant_to_op_to_everything():
    class Spec:
        op = "gemm"

    class Point:
        name, spec = "gemm_bf16_any", Spec()

    timings = {"gemm_bf16_any@sm_80": 4.0, "gemm_fp16_any@sm_90a": 2.0, "rms_norm_x@sm_80": 0.5}
    assert estimate(timings, Point, "sm_80") == 4.0
    assert estimate(timings, Point, "sm_86") == 4.0  # same variant, other arch
    Point.name = "gemm_fp16_n4096"
    assert estimate(timings, Point, "sm_80") == 3.0  # mean of the op's
    Spec.op = "swiglu"
    assert estimate(timings, Point, "sm_80") == pytest.approx(6.5 / 3)
    assert estimate({}, Point, "sm_80") == 1.0


def test_compile_comes_from_the_cache_the_second_time(monkeypatch, tmp_path):
    calls = []
    tc = compile_mod.Toolchain("nvrtc", sys.executable, (12, 9), ())
    monkeypatch.setattr(compile_mod, "find_toolchain", lambda compiler: tc)
    monkeypatch.setattr(compile_mod, "kernel_include_dirs", lambda extra=(): ["/inc"])
    monkeypatch.setattr(compile_mod, "cubin_arch", lambda data: data.decode())

    def fake_nvrtc(tc, code, name, options, **_):
        calls.append(options)
        return next(o for o in options if o.startswith("--gpu-arch")).split("=")[1].encode()

    monkeypatch.setattr(compile_mod, "_nvrtc_compile", fake_nvrtc)
    cache = Cache(tmp_path / "cache")
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k() {}\n")
    out = tmp_path / "k.cubin"
    assert compile_mod.compile_source(src, "sm_80", out, cache=cache) is False
    assert compile_mod.compile_source(src, "sm_80", out, cache=cache) is True
    assert len(calls) == 1 and out.read_bytes() == b"sm_80"
    assert json.loads((tmp_path / "k.cubin.json").read_text())["cached"] is True
    assert compile_mod.compile_source(src, "sm_90a", out, cache=cache) is False  # new key
    src.write_text("__global__ void k() { }\n")
    assert compile_mod.compile_source(src, "sm_80", out, cache=cache) is False
    assert len(calls) == 3


# ---- sharding ---------------------------------------------------------------------------------


def test_shards_partition_the_matrix():
    points = list(range(10))
    parts = [shard.select_shard(points, i, 3) for i in (1, 2, 3)]
    assert sorted(sum(parts, [])) == points
    assert parts[0] == [0, 3, 6, 9]
    assert shard.parse_shard("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "x", "1-2"):
        with pytest.raises(SystemExit, match="--shard"):
            shard.parse_shard(bad)


def _fake_shard(root: Path, index: int, count: int, **changes) -> Path:
    info = {
        "format": 1,
        "shard": [index, count],
        "specs": "toy_specs",
        "archs": ["sm_90a"],
        "ops": ["*"],
        "tilelang": "0.1.15",
        "variants": [],
    } | changes
    d = root / f"s{index}"
    (d / "shard").mkdir(parents=True)
    (d / "shard" / "shard.json").write_text(json.dumps(info))
    return d


def test_merge_refuses_incomplete_or_disagreeing_shards(tmp_path):
    with pytest.raises(SystemExit, match="need each of shards 1/3"):
        merge.merge(tmp_path / "out", [_fake_shard(tmp_path, 1, 3), _fake_shard(tmp_path, 3, 3)])
    a = _fake_shard(tmp_path / "x", 1, 2)
    b = _fake_shard(tmp_path / "x", 2, 2, archs=["sm_80"])
    with pytest.raises(SystemExit, match="shards disagree on archs"):
        merge.merge(tmp_path / "out", [a, b])
    with pytest.raises(SystemExit, match="is not a shard"):
        merge.merge(tmp_path / "out", [tmp_path])


def _build_tools(*args: str, cache: Path) -> None:
    env = dict(ENV, TILEAOT_CACHE_DIR=str(cache))
    subprocess.run([sys.executable, "-m", "build_tools", *args], check=True, cwd=ROOT, env=env)


def _gen_files(root: Path) -> dict[str, bytes]:
    keep = ("manifest.json", "registry.cpp", "cubins.cmake", "src")
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] in keep
    }


def test_two_shards_merge_into_the_single_machine_gen_folder(tmp_path):
    pytest.importorskip("tilelang")
    cache = tmp_path / "cache"  # shared: the shards reuse the single run's traces (fast)
    common = ["--specs", "toy_specs", "--archs", "80,90a", "--ops", "toy_scale*", "--jobs", "1"]
    _build_tools("generate", "--out", str(tmp_path / "single"), *common, cache=cache)
    for i in (1, 2):
        _build_tools("generate", "--out", str(tmp_path / f"s{i}"), "--shard", f"{i}/2", *common,
                     cache=cache)  # fmt: skip
    _build_tools("merge", str(tmp_path / "merged"), str(tmp_path / "s1"), str(tmp_path / "s2"),
                 cache=cache)  # fmt: skip
    single, merged = _gen_files(tmp_path / "single"), _gen_files(tmp_path / "merged")
    assert merged == single and "manifest.json" in merged
    s1 = json.loads((tmp_path / "s1" / "manifest.json").read_text())
    s2 = json.loads((tmp_path / "s2" / "manifest.json").read_text())
    names = {v["name"] for v in s1["variants"]}, {v["name"] for v in s2["variants"]}
    assert names[0] and names[1] and not names[0] & names[1]  # disjoint, both non-empty


# ---- build report -----------------------------------------------------------------------------


def tiny_elf(section_names: list[str], payload: int = 0) -> bytes:
    """A 64-bit ELF with EM_CUDA, the named (empty) sections and `payload` filler bytes."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [".shstrtab", *section_names])
    header = bytearray(64)
    header[:8] = b"\x7fELF\x02\x01\x01\x33"
    shoff = 64 + len(names) + payload
    count = 2 + len(section_names)  # null, .shstrtab, the rest
    struct.pack_into("<HHIQQQIHHHHHH", header, 16, 2, 190, 1, 0, 0, shoff, 0, 64, 0, 0, 64,
                     count, 1)  # fmt: skip
    sections = bytearray(64)  # the null section
    offset = 1
    for i, name in enumerate([".shstrtab", *section_names]):
        size = len(names) if i == 0 else 0
        sections += struct.pack("<IIQQQQIIQQ", offset, 3 if i == 0 else 1, 0, 0, 64, size,
                                0, 0, 1, 0)  # fmt: skip
        offset += len(name) + 1
    return bytes(header) + names + bytes(payload) + bytes(sections)


def _fake_gen(gen: Path) -> None:
    cubins = [
        {"cubin": "cubin/big.sm_80.cubin", "arch": "sm_80", "source": "src/big.cu"},
        {"cubin": "cubin/small.sm_90a.cubin", "arch": "sm_90a", "source": "src/small.cu"},
    ]
    variants = [
        {"name": "big_any", "op": "big", "arch": "sm_80", "blob": 0},
        {"name": "big_any", "op": "big", "arch": "sm_86", "blob": 0},
        {"name": "small_any", "op": "small", "arch": "sm_90a", "blob": 1},
    ]
    manifest = {"archs": ["sm_80", "sm_86", "sm_90a"], "ops": ["*"], "cubins": cubins,
                "variants": variants}  # fmt: skip
    (gen / "cubin").mkdir(parents=True)
    (gen / "manifest.json").write_text(json.dumps(manifest))
    (gen / "cubin" / "big.sm_80.cubin").write_bytes(tiny_elf([".text.big"], 300_000))
    (gen / "cubin" / "small.sm_90a.cubin").write_bytes(tiny_elf([".debug_line"], 1000))
    stats = {"seconds": 2.5, "cached": False}
    (gen / "cubin" / "big.sm_80.cubin.json").write_text(json.dumps(stats))
    (gen / "stats").mkdir()
    trace = {
        "big_any@sm_80": {"seconds": 9.0, "cached": False},
        "big_any@sm_86": {"seconds": 8.0, "cached": True},
        "small_any@sm_90a": {"seconds": 1.0, "cached": False},
    }
    (gen / "stats" / "trace.json").write_text(json.dumps(trace))


def test_report_has_times_cache_hits_and_sizes_per_op_and_arch(tmp_path):
    _fake_gen(tmp_path)
    data = report.write_report(tmp_path)
    t = data["totals"]
    assert (t["variants"], t["rows"], t["cubins"]) == (2, 3, 2)
    assert (t["traced"], t["traces_from_cache"], t["compiled"]) == (2, 1, 1)
    assert t["trace_seconds"] == 18.0 and t["compile_seconds"] == 2.5
    assert t["with_debug_info"] == 1
    assert list(data["size_by_op"]) == ["big", "small"]  # biggest first
    big = (tmp_path / "cubin" / "big.sm_80.cubin").stat().st_size
    assert data["size_by_arch"]["sm_80"]["bytes"] == big
    assert [(r["name"], r["arch"]) for r in data["slowest"]] == [
        ("big_any", "sm_80"),  # 9 s trace + 2.5 s compile
        ("big_any", "sm_86"),  # 8 s trace; its cubin is the sm_80 one, compiled once
        ("small_any", "sm_90a"),
    ]
    assert data["slowest"][1]["cubin_shared"]
    md = (tmp_path / "report.md").read_text()
    assert "| big_any | sm_86 | 8.0 (cache) | shared |" in md
    assert "## Size per op" in md and "## Size per arch" in md
    assert json.loads((tmp_path / "report.json").read_text())["totals"] == t


def test_size_budget_fails_naming_the_biggest_op_and_the_way_out(tmp_path, capsys):
    _fake_gen(tmp_path)
    assert report.main([str(tmp_path), "--budget-mb", "100"]) == 0
    assert report.main([str(tmp_path), "--budget-mb", "0.0001"]) == 1
    err = capsys.readouterr().err
    assert "over the size budget of 0.0001 MiB" in err
    assert "biggest ops: big" in err and "TILEAOT_OPS" in err and "TILEAOT_ARCHS" in err
    assert not (tmp_path / "report.json").exists()  # so the next build checks again
    assert (tmp_path / "report.md").exists()
