"""Compile batches: the sources of one op and one arch compiled as one NVRTC program (one cubin,
one embedded blob serving every variant in it). build_tools/generate.py forms them; the
runtime needs nothing new, as it already loads a module per blob and finds kernels by name."""

from __future__ import annotations

import json
import random

import pytest
from test_arch_targets import toolchain  # noqa: F401 - the fixture: skips without NVRTC

from build_tools import compile as compile_mod
from build_tools import generate as gen_mod
from build_tools import report
from build_tools.cache import Cache
from build_tools.cubin import _sections, cubin_kernels

HELPER = "__device__ __forceinline__ void helper(float* x) { *x += 1.0f; }\n"


def _kernel(name: str, helper: bool = False) -> str:
    body = "helper(x + threadIdx.x);" if helper else "x[threadIdx.x] *= 2.0f;"
    head = HELPER if helper else ""
    return head + f'extern "C" __global__ void {name}(float* x) {{ {body} }}\n'


def _units(specs):
    """(variant, digest, arch, text) -> the units and row map _compile_units returns."""
    units, arch_unit = {}, {}
    for variant, digest, arch, text in specs:
        ext = "ptx" if arch.startswith("compute_") else "cubin"
        units[(digest, arch)] = {
            "variant": variant,
            "source": f"src/{variant}.{digest}.cu",
            "text": text,
            "arch": arch,
            "cubin": f"{ext}/{variant}.{digest}.{arch}.{ext}",
        }
        arch_unit[(variant, arch)] = (digest, arch)
    return units, arch_unit


SPECS = [
    ("a_x", "d1", "sm_80", _kernel("a_x_kernel")),
    ("a_y", "d2", "sm_80", _kernel("a_y_kernel", helper=True)),
    ("a_z", "d3", "sm_80", _kernel("a_z_kernel", helper=True)),  # `helper` again: apart
    ("a_w", "d4", "sm_80", _kernel("a_w_kernel")),
    ("a_x", "d1", "compute_80", _kernel("a_x_kernel")),
    ("a_w", "d4", "compute_80", _kernel("a_w_kernel")),
    ("b_x", "d5", "sm_80", _kernel("b_x_kernel")),  # another op: a batch of its own
    ("a_x", "d6", "sm_90a", _kernel("a_x_kernel")),
]
OPS = {"a_x": "a", "a_y": "a", "a_z": "a", "a_w": "a", "b_x": "b"}


def test_batches_group_one_op_and_arch_and_keep_clashing_names_apart():
    units, arch_unit = _units(SPECS)
    out, rows = gen_mod._batch_units(units, arch_unit, OPS, limit=16)
    members = sorted(
        (u["arch"], tuple(m.split("/")[1].split(".")[0] for m in u.get("members", [u["source"]])))
        for u in out.values()
    )
    assert members == [
        ("compute_80", ("a_w", "a_x")),
        ("sm_80", ("a_w", "a_x", "a_y")),
        ("sm_80", ("a_z",)),
        ("sm_80", ("b_x",)),
        ("sm_90a", ("a_x",)),
    ]
    # every row points at the unit holding its source; singletons keep their old key and names
    for (variant, arch), key in rows.items():
        u = out[key]
        assert f"src/{variant}." in " ".join(u.get("members", [u["source"]])) and u["arch"] == arch
    assert out[("d5", "sm_80")] == units[("d5", "sm_80")]
    (batch,) = [u for u in out.values() if len(u.get("members", ())) == 3]
    assert batch["source"].startswith("src/a.x3.") and batch["cubin"].endswith(".sm_80.cubin")
    assert batch["text"].index('#line 1 "a_w.d4.cu"') < batch["text"].index('#line 1 "a_x.d1.cu"')
    (ptx,) = [u for u in out.values() if u["arch"] == "compute_80"]
    assert ptx["cubin"].startswith("ptx/") and ptx["cubin"].endswith(".compute_80.ptx")


def test_batches_are_deterministic_and_limited():
    units, arch_unit = _units(SPECS)
    shuffled = list(units.items())
    random.Random(1).shuffle(shuffled)
    a = gen_mod._batch_units(units, arch_unit, OPS, limit=16)
    b = gen_mod._batch_units(dict(shuffled), arch_unit, OPS, limit=16)
    assert a == b
    two, _ = gen_mod._batch_units(units, arch_unit, OPS, limit=2)
    assert max(len(u.get("members", [1])) for u in two.values()) == 2
    assert gen_mod._batch_units(units, arch_unit, OPS, limit=1) == (units, arch_unit)


def test_batch_max_from_the_environment(monkeypatch):
    monkeypatch.delenv("TILEAOT_BATCH_MAX", raising=False)
    assert gen_mod.batch_max() == gen_mod.BATCH_MAX
    monkeypatch.setenv("TILEAOT_BATCH_MAX", "1")
    assert gen_mod.batch_max() == 1
    monkeypatch.setenv("TILEAOT_BATCH_MAX", "0")
    with pytest.raises(SystemExit, match="TILEAOT_BATCH_MAX='0'.*1: no batching"):
        gen_mod.batch_max()


def _shared_kernel(name: str, dtype: str, array: str = "buf") -> str:
    decl = f"extern __shared__ __align__(1024) {dtype} {array}[];"
    return f'extern "C" __global__ void {name}() {{\n  {decl}\n  {array}[threadIdx.x] = 0;\n}}\n'


def test_dynamic_shared_arrays_batch_only_when_declared_alike():
    # block-scope `extern __shared__` arrays are one file-scope entity: a second declaration
    # of the name with another type does not compile, the same declaration does
    specs = [
        ("t_a", "e1", "sm_80", _shared_kernel("t_a_kernel", "float")),
        ("t_b", "e2", "sm_80", _shared_kernel("t_b_kernel", "float")),
        ("t_c", "e3", "sm_80", _shared_kernel("t_c_kernel", "int")),
        ("t_d", "e4", "sm_80", _shared_kernel("t_d_kernel", "int", array="other")),
    ]
    units, arch_unit = _units(specs)
    out, _ = gen_mod._batch_units(
        units, arch_unit, dict.fromkeys(["t_a", "t_b", "t_c", "t_d"], "t"), 16
    )
    groups = sorted(
        sorted(m.split("/")[1][:3] for m in u.get("members", [u["source"]])) for u in out.values()
    )
    assert groups == [["t_a", "t_b", "t_d"], ["t_c"]]


def test_defined_names():
    text = _kernel("k1", helper=True) + (
        'extern "C" __global__ void __launch_bounds__(128, 1) k2(float* x) {}\n'
    )
    assert gen_mod.defined_names(text) == dict.fromkeys(["k1", "k2", "helper"])
    shared = gen_mod.defined_names(_shared_kernel("k3", "float"))
    assert shared == {"buf": "__align__(1024) float", "k3": None}


def test_report_counts_a_batch_compile_once(tmp_path):
    (tmp_path / "cubin").mkdir()
    (tmp_path / "cubin" / "a.x2.sm_80.cubin").write_bytes(
        b"not an ELF: the report reads only its size"
    )
    stats = {"seconds": 3.0, "cached": False}
    (tmp_path / "cubin" / "a.x2.sm_80.cubin.json").write_text(json.dumps(stats))
    cubin = {"symbol": "tileaot_blob_0", "source": "src/a.x2.cu", "arch": "sm_80"}
    variants = [
        {"name": n, "op": "a", "arch": a, "blob": 0}
        for n, a in (("a_x", "sm_80"), ("a_x", "sm_86"), ("a_y", "sm_80"))
    ]
    manifest = {
        "archs": ["sm_80", "sm_86"],
        "ops": ["*"],
        "variants": variants,
        "cubins": [cubin | {"cubin": "cubin/a.x2.sm_80.cubin"}],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    data = report.build_report(tmp_path)
    seconds = [(r["name"], r["arch"], r["compile_seconds"]) for r in data["variants"]]
    assert seconds == [("a_x", "sm_80", 3.0), ("a_x", "sm_86", 0.0), ("a_y", "sm_80", 0.0)]
    assert data["totals"]["compile_seconds"] == 3.0


def _text_sections(cubin: bytes) -> dict[str, bytes]:
    return {name: body for name, _, body, _ in _sections(cubin) if name.startswith(".text.")}


@pytest.mark.usefixtures("toolchain")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_batch_cubin_holds_each_kernel_as_compiled_alone(tmp_path, arch):
    cache = Cache(tmp_path / "cache")
    units, _ = _units(
        [
            ("a_x", "d1", arch, _kernel("a_x_kernel")),
            ("a_y", "d2", arch, _kernel("a_y_kernel", True)),
        ]
    )
    members = list(units.values())
    alone = {}
    for u in members:
        src = tmp_path / u["source"].removeprefix("src/")
        src.write_text(u["text"])
        compile_mod.compile_source(src, arch, tmp_path / f"{src.name}.cubin", cache=cache)
        alone |= _text_sections((tmp_path / f"{src.name}.cubin").read_bytes())
    src = tmp_path / "a.x2.cu"
    src.write_text(gen_mod.batch_text(members))
    compile_mod.compile_source(src, arch, tmp_path / "a.x2.cubin", cache=cache)
    batch = (tmp_path / "a.x2.cubin").read_bytes()
    assert cubin_kernels(batch) == ["a_x_kernel", "a_y_kernel"]
    assert _text_sections(batch) == alone  # the same machine code, kernel for kernel
