"""Which code each real GPU gets from a default build: the runtime's selection (cpp/runtime/
select.cpp, through the fake registry's arch_table group: one row per default target plus the
forward path's compute_80 PTX) and `python -m tileaot check`'s replay (tileaot._manifest) must
agree, GPU by GPU, with each other and with the table below.

Compute capabilities: NVIDIA's table (https://developer.nvidia.com/cuda-gpus); Jetson Thor is
11.0 from CUDA 13 on.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tileaot  # noqa: F401
except ImportError:  # a source checkout: test the package in python/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from kernels_py.spec import DEFAULT_ARCHS

_arch = importlib.import_module("tileaot._arch")
_manifest = importlib.import_module("tileaot._manifest")

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "cpp" / "tests_native"
BUILD = ROOT / "build" / "tests_native"

PTX = "compute_80"
# GPU (as NVIDIA names it) -> (compute capability, what a default build runs there).
TABLE = {
    "V100": ((7, 0), "sm_70"),
    "T4": ((7, 5), "sm_75"),
    "A100": ((8, 0), "sm_80"),
    "A10": ((8, 6), "sm_80"),
    "L4": ((8, 9), "sm_80"),
    "L40S": ((8, 9), "sm_80"),
    "RTX 4090": ((8, 9), "sm_80"),
    "H100": ((9, 0), "sm_90a"),
    "H200": ((9, 0), "sm_90a"),
    "H20": ((9, 0), "sm_90a"),
    "GH200": ((9, 0), "sm_90a"),
    "B200": ((10, 0), "sm_100f"),
    "B300": ((10, 3), "sm_100f"),
    "GB300": ((10, 3), "sm_100f"),
    "RTX 5090": ((12, 0), "sm_120f"),
    "RTX PRO 6000": ((12, 0), "sm_120f"),
    "DGX Spark": ((12, 1), "sm_120f"),
    "Jetson Thor": ((11, 0), PTX),
}
# Not GPUs of the table, but the edges of the rules: a GPU after them (PTX) and one before
# sm_70 (a miss even for the PTX: compute_80 JIT-compiles only for 8.0 and newer).
EDGES = {"13.0": PTX, "6.1": "MISS", "10.1": "sm_100f", "9.1": PTX}


def _native_table() -> Path:
    """cpp/tests_native's test_runtime, built here (as scripts/test.sh builds it)."""
    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        pytest.skip("needs cmake and ninja to build cpp/tests_native")
    subprocess.run(
        ["cmake", "-S", NATIVE, "-B", BUILD, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["cmake", "--build", BUILD, "--target", "test_runtime"], check=True, capture_output=True
    )
    return BUILD / "test_runtime"


@pytest.fixture(scope="module")
def native():
    return _native_table()


def _native_picks(binary: Path, ccs: list[str], ptx: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TILEAOT_PTX"}
    if ptx is not None:
        env["TILEAOT_PTX"] = ptx
    out = subprocess.run(
        [binary, "table", *ccs], check=True, capture_output=True, text=True, env=env
    ).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def _rows(targets) -> list:
    return [
        _manifest.Row("arch_table_any", "arch_table", "bf16", "any", _arch.target(t), {}, ("M",))
        for t in targets
    ]


# The fake registry's arch_table rows (cpp/tests_native/registry_fake.cpp).
FAKE_TARGETS = ("sm_120f", "sm_100f", "sm_90a", "sm_80", "sm_75", "sm_70", PTX)


def _replay(cc: str, ptx: str = "auto") -> str:
    major, minor = _arch.parse_device(cc)
    row = _manifest.select(_rows(FAKE_TARGETS), major, minor, (7,), ptx)
    return row.target.name if row else "MISS"


def test_fake_rows_are_the_default_targets():
    assert set(FAKE_TARGETS) - {PTX} == set(DEFAULT_ARCHS) == set(_arch.DEFAULT)


@pytest.mark.parametrize("gpu", sorted(TABLE))
def test_gpu_names_parse(gpu):
    assert _arch.parse_device(gpu) == TABLE[gpu][0]


def test_gpu_table_native_and_replay_agree(native):
    ccs = {gpu: f"{cc[0]}.{cc[1]}" for gpu, (cc, _) in TABLE.items()}
    picks = _native_picks(native, sorted(set(ccs.values()) | set(EDGES)))
    for gpu, (_, want) in TABLE.items():
        cc = ccs[gpu]
        assert (gpu, picks[cc]) == (gpu, want)
        assert (gpu, _replay(gpu)) == (gpu, want)
    for cc, want in EDGES.items():
        assert (cc, picks[cc], _replay(cc)) == (cc, want, want)


@pytest.mark.parametrize("mode", ["off", "prefer", "prefer:80", "prefer:70"])
def test_ptx_modes_native_and_replay_agree(native, mode):
    ccs = sorted({f"{cc[0]}.{cc[1]}" for cc, _ in TABLE.values()} | set(EDGES))
    picks = _native_picks(native, ccs, mode)
    replayed = {cc: _replay(cc, _arch.ptx_mode(mode)) for cc in ccs}
    assert picks == replayed
    if mode == "off":
        assert picks["11.0"] == "MISS" and picks["9.0"] == "sm_90a"
    if mode in ("prefer", "prefer:80"):  # PTX first wherever compute_80 can JIT
        assert picks["9.0"] == picks["8.6"] == picks["12.1"] == PTX and picks["7.5"] == "sm_75"
    if mode == "prefer:70":  # no compute_70 in these rows: SASS as usual
        assert picks["9.0"] == "sm_90a" and picks["11.0"] == PTX


@pytest.mark.parametrize(
    "text",
    [
        "NVIDIA H800",
        "A800",
        "A10G",
        "RTX A6000",
        "GB300",
        "B100",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA GeForce RTX 5090",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "Tesla V100-SXM2-32GB",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA GB10",
    ],
)
def test_nvidia_smi_names(text):
    want = {
        "NVIDIA H800": (9, 0),
        "A800": (8, 0),
        "A10G": (8, 6),
        "RTX A6000": (8, 6),
        "GB300": (10, 3),
        "B100": (10, 0),
        "NVIDIA H100 80GB HBM3": (9, 0),
        "NVIDIA GeForce RTX 5090": (12, 0),
        "NVIDIA RTX PRO 6000 Blackwell Server Edition": (12, 0),
        "Tesla V100-SXM2-32GB": (7, 0),
        "NVIDIA A100-SXM4-80GB": (8, 0),
        "NVIDIA GB10": (12, 1),
    }[text]
    assert _arch.parse_device(text) == want


def test_ptx_mode_rejects_nonsense():
    with pytest.raises(ValueError, match="TILEAOT_PTX='always' is not one of auto"):
        _arch.ptx_mode("always")


# ---- one arch spelling for the build: --archs, TILEAOT_ARCHS (via `build_tools archs`), TOML ----


@pytest.mark.parametrize(
    "text, want",
    [
        ("90", "sm_90a"),
        ("sm_90", "sm_90a"),
        ("9.0", "sm_90a"),
        ("H100", "sm_90a"),
        ("90a", "sm_90a"),
        ("100", "sm_100f"),
        ("B300", "sm_100f"),
        ("10.3", "sm_100f"),
        ("100a", "sm_100a"),
        ("120", "sm_120f"),
        ("DGX Spark", "sm_120f"),
        ("86", "sm_86"),
        ("A10G", "sm_80"),
    ],
)
def test_build_target_spellings(text, want):
    assert _arch.build_target(text) == want


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "build_tools", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_list_takes_what_check_takes():
    out = _cli("list", "--archs", "90;B300", "--ops", "rms_norm_bf16_any")
    assert out.returncode == 0, out.stderr
    assert "archs=sm_90a,sm_100f" in out.stdout


@pytest.mark.parametrize("archs", ["foo", "110", "sm_100x"])
def test_list_refuses_a_bad_arch_in_one_line(archs):
    out = _cli("list", "--archs", archs, "--ops", "rms_norm_bf16_any")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and repr(archs) in out.stderr


def test_cmake_normalisation_command():
    ok = _cli("archs", "70;9.0,B300;sm_120f;H200")
    assert (ok.returncode, ok.stdout.strip()) == (0, "70,90a,100f,120f")
    bad = _cli("archs", "80;Voodoo")
    assert bad.returncode == 1 and "unknown arch 'Voodoo' in TILEAOT_ARCHS" in bad.stderr
    assert _cli("archs", "--ptx", "off").stdout.strip() == "off"
    assert _cli("archs", "--ptx", "70;75;80").stdout.strip() == "70,75,80"
