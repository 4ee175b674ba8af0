"""The aarch64 wheel (scripts/build_wheel_aarch64.sh): aarch64 code only, and under qemu-user
emulation in the aarch64 root it imports and `python -m tileaot info` describes the build.

CPU only. The wheel's tests need it in dist/aarch64/ (or $TILEAOT_AARCH64_WHEEL); the import
also needs qemu-aarch64-static and the script's aarch64 root. CI does not make them (about 10
minutes on the 2-core machine: docs/RELEASE.md), so there they skip, saying what to run. The
script's own errors are tested everywhere.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from build_tools.wheel_audit import MACHINES, audit, elf_machine

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "build_wheel_aarch64.sh"
BUILD_IT = "build it with: bash scripts/build_wheel_aarch64.sh (docs/RELEASE.md)"


@pytest.fixture(scope="module")
def wheel() -> Path:
    given = os.environ.get("TILEAOT_AARCH64_WHEEL")
    found = [given] if given else sorted(glob.glob(str(REPO / "dist/aarch64/tileaot-*aarch64.whl")))
    if not found:
        pytest.skip(f"no aarch64 wheel in dist/aarch64/: {BUILD_IT}")
    return Path(found[-1])


def test_every_shared_object_is_aarch64(wheel):
    with zipfile.ZipFile(wheel) as z:
        shared = {n: z.read(n) for n in z.namelist() if re.search(r"\.so(\.\d+)*$", n)}
    assert any(re.fullmatch(r"tileaot/_C\.cpython-3\d+-aarch64-linux-gnu\.so", n) for n in shared)
    assert "tileaot/lib/libtileaot.so" in shared
    for name, data in shared.items():
        assert data[:4] == b"\x7fELF", name
        assert elf_machine(data) == MACHINES["aarch64"] == 183, name
    elves, bad = audit(str(wheel))  # the same rule, as release checks run it
    assert len(elves) == len(shared) and bad == []


def _root() -> Path:
    out = subprocess.run(["bash", str(SCRIPT), "root-dir"], capture_output=True, text=True)
    return Path(out.stdout.strip())


def test_imports_and_prints_info_under_emulation(wheel, tmp_path):
    qemu = shutil.which("qemu-aarch64-static")
    root = _root()
    if qemu is None:
        pytest.skip(
            f"qemu-aarch64-static not installed (apt-get install qemu-user-static); {BUILD_IT}"
        )
    if not (root / ".tileaot-root").exists():
        pytest.skip(f"no aarch64 root at {root}: bash scripts/build_wheel_aarch64.sh root")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
        manifest = json.loads(z.read("tileaot/manifest.json"))
    # Only the wheel on the path (not the worktree's python/), run from outside the repo.
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site), "LANG": "C.UTF-8"}
    run = subprocess.run(
        [qemu, "-L", str(root), str(root / "usr/bin/python3"), "-m", "tileaot", "info", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout)
    assert info["native"].startswith(str(site / "tileaot" / "_C.cpython-"))
    assert info["native"].endswith("-aarch64-linux-gnu.so")
    assert info["archs"] == manifest["archs"]
    # The native registry, read through the emulated module, is the manifest's variant table.
    rows = {
        (op, key, spec, arch)
        for op, keys in info["variants"].items()
        for key, specs in keys.items()
        for spec, archs in specs.items()
        for arch in archs
    }
    assert rows == {(v["op"], v["key"], v["spec"], v["arch"]) for v in manifest["variants"]}
    assert rows
    # No driver here: info still works and says why nothing is picked.
    assert info["device_arch"] is None and info["picks"] == []
    assert "not usable" in info["device_error"] or "driver" in info["device_error"]


def test_a_missing_tool_or_step_is_one_line(tmp_path):
    (tmp_path / "dirname").symlink_to(shutil.which("dirname"))  # all the script needs first
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess:
        cmd = [shutil.which("bash"), str(SCRIPT), *args]
        return subprocess.run(cmd, env=env, capture_output=True, text=True)

    missing = run("wheel", str(tmp_path))
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == (
        "build_wheel_aarch64: aarch64-linux-gnu-g++ not found: apt-get install "
        "g++-aarch64-linux-gnu\n"
    )
    unknown = run("--gen")
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1
    assert unknown.stderr.startswith("build_wheel_aarch64: unknown option --gen: the steps are")
