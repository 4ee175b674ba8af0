"""What scripts/build_wheel.sh shows while `pip wheel` hides the build's output: the build's
progress lines go to $TILEAOT_PROGRESS_FILE and `python -m build_tools watch` prints them
(tracing done/total with an ETA, compiling done/total with an ETA, then the report summary).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

progress = pytest.importorskip("build_tools.progress")
watch = pytest.importorskip("build_tools.watch")

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_lines_go_to_the_file(tmp_path, monkeypatch, capsys):
    path = tmp_path / "progress"
    monkeypatch.setenv(progress.PROGRESS_ENV, str(path))
    clock = Clock()
    bar = progress.Progress("tracing", 3, clock=clock)
    for _ in range(3):
        clock.now += 10
        bar.advance(note="rms_norm_bf16_any@sm_80")
    bar.message("tileaot generate: tracing x failed")
    lines = path.read_text().splitlines()
    assert lines[0] == "tracing: 0/3 (0%), 0s elapsed"
    assert "tracing: 1/3 (33%), 10s elapsed, ETA 20s" in lines
    assert "tracing: 3/3 (100%), 30s elapsed" in lines
    assert lines[-1] == "tileaot generate: tracing x failed"


def test_no_file_no_writes(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    progress.note("nothing")  # no error, nowhere written
    monkeypatch.setenv(progress.PROGRESS_ENV, str(tmp_path / "missing" / "file"))
    progress.note("unwritable")  # never fails the build


def test_watcher_turns_compiled_lines_into_done_total_and_eta():
    clock = Clock()
    w = watch.Watcher(clock=clock)
    assert w.feed("tracing: 5/5 (100%), 50s elapsed\n") == ["tracing: 5/5 (100%), 50s elapsed"]
    assert w.feed("compile-total 4") == []
    assert w.feed("compiled a.cubin")[0].startswith("compiling: 1/4 (25%), 0s elapsed")
    clock.now = 5
    assert w.feed("compiled b.cubin") == []  # at most one line per COMPILE_INTERVAL
    clock.now = 12
    assert w.feed("compiled c.cubin") == ["compiling: 3/4 (75%), 12s elapsed, ETA 4s"]
    clock.now = 13
    assert w.feed("compiled d.cubin") == ["compiling: 4/4 (100%), 13s elapsed"]  # the last
    assert w.feed("end") == []


def test_watch_prints_as_lines_arrive_and_stops_at_end(tmp_path, monkeypatch):
    monkeypatch.setattr(watch, "POLL", 0.01)
    path = tmp_path / "progress"
    monkeypatch.setenv(progress.PROGRESS_ENV, str(path))  # as in build_wheel.sh
    path.write_text("tracing: 0/2 (0%), 0s elapsed\n")
    out = []

    class Sink:
        def write(self, text):
            out.append(text)

        def flush(self):
            pass

    t = threading.Thread(target=watch.watch, args=(path, None, Sink()))
    t.start()
    with open(path, "a") as f:
        f.write("compile-total 1\ncompiled x.cubin\nend\n")
    t.join(timeout=10)
    assert not t.is_alive()
    text = "".join(out)
    assert "[tileaot] tracing: 0/2 (0%)" in text and "[tileaot] compiling: 1/1 (100%)" in text
    assert "compiling" not in path.read_text()  # the watcher only reads the file


def test_summary_is_the_reports_line(tmp_path, capsys):
    totals = {
        "rows": 5,
        "cubins": 5,
        "bytes": 3 * 2**20,
        "zipped": 2**20,
        "traced": 5,
        "traces_from_cache": 0,
        "compiled": 5,
        "cubins_from_cache": 0,
    }
    (tmp_path / "tag").mkdir()
    (tmp_path / "tag" / "report.json").write_text(json.dumps({"totals": totals}))
    assert watch.main(["--summary", str(tmp_path)]) == 0
    line = capsys.readouterr().out
    assert line.startswith("tileaot report: 5 rows, 5 cubins, 3.00 MiB (1.00 MiB zipped)")
    assert watch.main(["--summary", str(tmp_path / "none")]) == 1
    assert "no build report under" in capsys.readouterr().err


def test_build_wheel_sh_runs_the_watcher_beside_pip():
    script = (ROOT / "scripts" / "build_wheel.sh").read_text()
    assert "TILEAOT_PROGRESS_FILE" in script and "build_tools watch" in script
    assert script.index('build_tools watch "$progress"') < script.index("pip wheel .")
    assert "watch --summary build" in script
