"""build_tools audit-wheel: a wheel may bundle or need no CUDA/torch library (CPU, fast)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from build_tools.wheel_audit import ElfInfo, audit, main, problems, wheel_cpu

pytest.importorskip("elftools", reason="pyelftools comes with auditwheel (scripts/audit_wheel.sh)")
CC = shutil.which("cc") or shutil.which("gcc")
CROSS_CC = shutil.which("aarch64-linux-gnu-gcc")


def test_rules_on_names_needs_and_runpaths():
    clean = ElfInfo("tileaot/_C.so", ("libtileaot.so", "libc.so.6"), ("$ORIGIN/lib",))
    assert problems([clean], ["tileaot/_C.so", "tileaot/lib/libtileaot.so"]) == []
    # zlib (compressed cubins) and the C++ runtime are system libraries of the manylinux policy.
    lib = ElfInfo("tileaot/lib/libtileaot.so", ("libz.so.1", "libstdc++.so.6", "libm.so.6"), ())
    assert problems([lib], ["tileaot/lib/libtileaot.so"]) == []
    bad = [
        ElfInfo("tileaot/lib/libtileaot.so", ("libcudart.so.12", "libcuda.so.1"), ()),
        ElfInfo("tileaot/_C.so", ("libtorch_cpu.so",), ("/usr/local/cuda/lib64",)),
    ]
    names = ["tileaot.libs/libnvrtc-6b3c1a2f.so.12", "tileaot/libcudnn.so.9"]
    assert problems(bad, names) == [
        "tileaot.libs/libnvrtc-6b3c1a2f.so.12: a CUDA/torch library is bundled in the wheel",
        "tileaot/libcudnn.so.9: a CUDA/torch library is bundled in the wheel",
        "tileaot/lib/libtileaot.so: needs libcudart.so.12 (DT_NEEDED)",
        "tileaot/lib/libtileaot.so: needs libcuda.so.1 (DT_NEEDED)",
        "tileaot/_C.so: needs libtorch_cpu.so (DT_NEEDED)",
        "tileaot/_C.so: RUNPATH /usr/local/cuda/lib64 points outside the wheel",
    ]


def _so(tmp: Path, name: str, *link: str, soname: str = "", runpath: str = "") -> Path:
    src = tmp / f"{name}.c"
    src.write_text(f"int {name.replace('.', '_').replace('-', '_')}(void) {{ return 1; }}\n")
    cmd = [CC, "-shared", "-fPIC", "-o", str(tmp / name), str(src), f"-L{tmp}"]
    cmd += [f"-Wl,-soname,{soname}"] if soname else []
    cmd += [f"-Wl,-rpath,{runpath}"] if runpath else []
    subprocess.run([*cmd, "-Wl,--no-as-needed", *link], check=True, capture_output=True)
    return tmp / name


@pytest.mark.skipif(CC is None, reason="needs a C compiler to make test ELF files")
def test_reads_real_elf_files(tmp_path, capsys):
    _so(tmp_path, "libcudart.so", soname="libcudart.so.12")  # a stand-in, linked by name only
    good = _so(tmp_path, "good.so", "-lm", runpath="$ORIGIN/lib")
    bad = _so(tmp_path, "bad.so", "-lcudart")
    wheel = tmp_path / "tileaot-0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(good, "tileaot/_C.so")
        z.writestr("tileaot/__init__.py", "")
    elves, bad_lines = audit(str(wheel))
    assert [(e.path, e.runpath) for e in elves] == [("tileaot/_C.so", ("$ORIGIN/lib",))]
    assert "libm.so.6" in elves[0].needed and bad_lines == []
    assert main([str(wheel)]) == 0
    with zipfile.ZipFile(wheel, "a") as z:
        z.write(bad, "tileaot/lib/libtileaot.so")
    assert main([str(wheel)]) == 1
    err = capsys.readouterr().err
    assert "FORBIDDEN tileaot/lib/libtileaot.so: needs libcudart.so.12 (DT_NEEDED)" in err


def test_the_wheels_cpu_comes_from_its_platform_tag():
    assert wheel_cpu("dist/tileaot-0.1.0-cp311-cp311-manylinux_2_34_aarch64.whl") == "aarch64"
    assert wheel_cpu("tileaot-0.1.0-cp312-abi3-linux_x86_64.whl") == "x86_64"
    tag = "manylinux_2_17_x86_64.manylinux2014_x86_64"
    assert wheel_cpu(f"tileaot-0.1.0-cp312-abi3-{tag}.whl") == "x86_64"
    assert wheel_cpu("tileaot-0.1.0-py3-none-any.whl") is None


def test_every_shared_object_must_match_the_tags_cpu():
    x86 = ElfInfo("tileaot/lib/libtileaot.so", ("libc.so.6",), (), machine=62)
    arm = ElfInfo("tileaot/_C.so", ("libc.so.6",), ("$ORIGIN/lib",), machine=183)
    names = [x86.path, arm.path]
    assert problems([x86, arm], names, "aarch64") == [
        "tileaot/lib/libtileaot.so: code for ELF machine 62, but the wheel is for aarch64 "
        "(machine 183)"
    ]
    assert problems([x86], names, "x86_64") == problems([x86, arm], names) == []


@pytest.mark.skipif(CROSS_CC is None, reason="needs aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu)")
def test_an_x86_library_in_an_aarch64_wheel_fails(tmp_path, capsys):
    src = tmp_path / "f.c"
    src.write_text("int f(void) { return 1; }\n")
    arm = tmp_path / "arm.so"
    subprocess.run([CROSS_CC, "-shared", "-fPIC", "-o", arm, src], check=True)
    wheel = tmp_path / "tileaot-0-cp311-cp311-linux_aarch64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(arm, "tileaot/_C.so")
    assert main([str(wheel)]) == 0
    assert "for aarch64 (ELF machine 183)" in capsys.readouterr().out
    with zipfile.ZipFile(wheel, "a") as z:  # a host library left in by a broken cross build
        z.write(_so(tmp_path, "libtileaot.so"), "tileaot/lib/libtileaot.so")
    assert main([str(wheel)]) == 1
    assert "libtileaot.so: code for ELF machine 62, but the wheel is for aarch64" in (
        capsys.readouterr().err
    )
