"""Lowering classes (build_tools/lowering.py): one trace per class of archs, compiled per arch.

CPU and fast: the tracer is replaced by a fake that "lowers" a fake factory in-process (the
factory returns the device source as text), so these tests count traces exactly.
"""

from __future__ import annotations

import pytest

from build_tools import lowering, tracing, verify_lowering
from build_tools.cache import Cache
from build_tools.generate import write_gen
from build_tools.matrix import enumerate_variants
from kernels_py.spec import (
    ALL_CUDA_SAME,
    BY_GENERATION,
    DEFAULT_ARCHS,
    EVERY_ARCH_SEPARATE,
    KernelSpec,
)

CALLS: list[tuple[str, str]] = []  # (variant, arch) the fake tracer lowered


def _same_everywhere(arch, dtype, N=None):
    return f"__global__ void k_{dtype}_{N}() {{}}\n"


def _differs_on_hopper(arch, dtype, N=None):
    body = "wgmma();" if arch == "sm_90a" else ""
    return f"__global__ void k_{dtype}_{N}() {{{body}}}\n"


def _spec(factory=_same_everywhere, classes=ALL_CUDA_SAME, reason="per-thread code", op="fake"):
    return KernelSpec(
        op,
        factory,
        ({"dtype": "bfloat16"},),
        ({}, {"N": 256}),
        reference=None,
        lowering_classes=classes,
        lowering_reason=reason,
    )


_X = {"name": "x", "kind": "tensor", "dtype": "bfloat16", "shape": ["d_M"], "data": "x"}
_SIGNATURE = {"params": [_X | {"shape_text": ["M"]}], "dyn": ["M"], "binds": [[0, "M"]],
              "checks": [], "text": "x[M]"}  # fmt: skip


def _kernel(name: str) -> dict:
    return {"symbol": f"{name}_kernel", "grid": ["d_M", "1", "1"], "block": ["128", "1", "1"],
            "smem": 0, "pdl": False, "cooperative": False, "cluster": [1, 1, 1],
            "args": [{"kind": "ptr", "value": "a.ptrs[0]"}]}  # fmt: skip


def _fake_trace_missing(todo, jobs, module, cache, timings, traced, stats):
    for point, arch, key in todo:
        CALLS.append((point.name, arch))
        source = point.spec.factory(arch=arch, **point.key, **point.specialisation)
        result = [_SIGNATURE, {"source": source, "kernels": [_kernel(point.name)]}]
        traced[(point.name, arch)] = result
        stats[(point.name, arch)] = {"seconds": 1.0, "cached": False}
        cache.put_json("trace", key, {"result": result, "seconds": 1.0})


@pytest.fixture(autouse=True)
def fake_tracer(monkeypatch):
    CALLS.clear()
    monkeypatch.setattr(tracing, "_trace_missing", _fake_trace_missing)
    monkeypatch.delenv(lowering.ENV_VAR, raising=False)


def _trace(tmp_path, spec, archs=DEFAULT_ARCHS, share=None):
    points = enumerate_variants([spec], archs)
    traced, stats = tracing.trace_all(points, 1, "kernels_py", Cache(tmp_path / "cache"), share)
    return points, traced, stats


def test_a_class_is_traced_once_and_its_trace_serves_every_arch(tmp_path):
    points, traced, stats = _trace(tmp_path, _spec())
    assert sorted(CALLS) == [("fake_bf16_any", "sm_70"), ("fake_bf16_n256", "sm_70")]
    assert len(traced) == 2 * len(DEFAULT_ARCHS)
    for arch in DEFAULT_ARCHS[1:]:
        assert traced[("fake_bf16_any", arch)] == traced[("fake_bf16_any", "sm_70")]
        assert stats[("fake_bf16_any", arch)] == {"seconds": 0.0, "cached": None, "shared": "sm_70"}
    assert lowering.trace_count(points) == 2
    assert lowering.trace_count(points, share=False) == 12


def test_the_gen_folder_is_the_same_with_and_without_sharing(tmp_path):
    """Same sources, manifest, registry and compile list: every arch still has its row and
    its compile entry (sm_75 shares sm_70's cubin, as it does when traced apart)."""
    files = {}
    for share in (True, False):
        points, traced, _ = _trace(tmp_path / str(share), _spec(), share=share)
        out = tmp_path / f"gen{share}"
        manifest = write_gen(out, points, traced, DEFAULT_ARCHS, ("*",), "0.0")
        files[share] = {p.name: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert files[True] == files[False]
    assert len(CALLS) == 2 + 12
    archs = {c["arch"] for c in manifest["cubins"]}
    assert archs == {"sm_70", "sm_80", "sm_90a", "sm_100f", "sm_120f", "compute_80"}
    rows = {(v["name"], v["arch"]) for v in manifest["variants"]}
    assert {a for _, a in rows} == {*DEFAULT_ARCHS, "compute_80"}


def test_the_build_report_counts_the_shared_traces(tmp_path):
    from build_tools import report
    from build_tools.generate import write_trace_stats

    points, traced, stats = _trace(tmp_path, _spec())
    write_gen(tmp_path / "gen", points, traced, DEFAULT_ARCHS, ("*",), "0.0")
    write_trace_stats(tmp_path / "gen", stats)
    data = report.build_report(tmp_path / "gen")
    t = data["totals"]
    assert (t["traced"], t["traces_from_cache"], t["traces_shared"]) == (2, 0, 10)
    rows = [r for r in data["variants"] if r["name"] == "fake_bf16_any"]
    shared = {r["arch"]: r["trace_shared"] for r in rows}
    assert shared["sm_120f"] == "sm_70" and shared["sm_70"] is None
    assert "2 new + 0 cached + 10 shared" in report.summary_line(data, tmp_path / "r.md")


def test_the_environment_switch_traces_every_arch(tmp_path, monkeypatch):
    monkeypatch.setenv(lowering.ENV_VAR, "1")
    _trace(tmp_path, _spec())
    assert len(CALLS) == 2 * len(DEFAULT_ARCHS)
    assert lowering.sharing_enabled({lowering.ENV_VAR: "0"})
    assert not lowering.sharing_enabled({lowering.ENV_VAR: "1"})


def test_the_representative_trace_is_cached_and_reused(tmp_path):
    _trace(tmp_path, _spec())
    _trace(tmp_path, _spec())
    assert len(CALLS) == 2  # the second build: everything from the cache


def test_groups_follow_the_declaration_and_other_archs_trace_alone(tmp_path):
    _trace(tmp_path, _spec(classes=BY_GENERATION))
    assert sorted({a for _, a in CALLS}) == ["sm_100f", "sm_70", "sm_80"]
    CALLS.clear()
    _trace(tmp_path / "b", _spec(), archs=("sm_80", "sm_86", "sm_90a", "sm_103a"))
    assert sorted({a for _, a in CALLS}) == ["sm_103a", "sm_80", "sm_86"]
    CALLS.clear()
    _trace(tmp_path / "c", _spec(classes=EVERY_ARCH_SEPARATE, reason=""))
    assert len(CALLS) == 12


def test_a_per_variant_declaration_is_asked_with_its_key_and_spec(tmp_path):
    def classes(key, spec):
        return ALL_CUDA_SAME if spec else EVERY_ARCH_SEPARATE

    points, _, _ = _trace(tmp_path, _spec(classes=classes))
    assert sum(n == "fake_bf16_n256" for n, _ in CALLS) == 1
    assert sum(n == "fake_bf16_any" for n, _ in CALLS) == len(DEFAULT_ARCHS)


def test_verify_names_the_op_variant_and_archs_whose_sources_differ(tmp_path):
    points = enumerate_variants([_spec(_differs_on_hopper)], DEFAULT_ARCHS)
    problems = verify_lowering.verify(points, 1, "kernels_py", Cache(tmp_path))
    assert len(CALLS) == 12  # verify traces every arch on its own
    assert len(problems) == 2
    assert problems[0].startswith("fake: fake_bf16_any: sm_70 and sm_90a differ in the device")
    good = enumerate_variants([_spec()], DEFAULT_ARCHS)
    assert verify_lowering.verify(good, 1, "kernels_py", Cache(tmp_path / "good")) == []


def test_verify_command_fails_on_a_wrong_declaration(monkeypatch, capsys, tmp_path):
    import sys
    import types

    module = types.ModuleType("fake_specs_lowering")
    module.all_specs = lambda: [_spec(_differs_on_hopper, op="bad"), _spec(op="good")]
    monkeypatch.setitem(sys.modules, "fake_specs_lowering", module)
    monkeypatch.setenv("TILEAOT_CACHE_DIR", str(tmp_path))
    assert verify_lowering.main(["--specs", "fake_specs_lowering", "--ops", "good*"]) == 0
    assert verify_lowering.main(["--specs", "fake_specs_lowering", "--ops", "bad*"]) == 1
    err = capsys.readouterr().err
    assert "error: bad: bad_bf16_any: sm_70 and sm_90a differ" in err
    assert "2 of 2 variants declare shared lowerings; 2 mismatches" in err


@pytest.mark.parametrize(
    ("classes", "reason", "message"),
    [
        ((("sm_80", "sm_99"),), "r", "unknown archs ['sm_99']"),
        ((("sm_80", "sm_90a"), ("sm_90a",)), "r", "archs in two groups ['sm_90a']"),
        (ALL_CUDA_SAME, "", "needs a lowering_reason"),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_op(classes, reason, message):
    spec = _spec(classes=classes, reason=reason)
    with pytest.raises(ValueError, match=message.replace("[", r"\[")) as info:
        spec.lowering_groups({"dtype": "bfloat16"}, {})
    assert str(info.value).startswith("fake: ")


def test_every_real_declaration_is_well_formed_and_gemm_stays_per_arch():
    from kernels_py import all_specs

    for spec in all_specs():
        for key in spec.keys:
            for s in spec.specs:
                groups = spec.lowering_groups(key, s)  # raises on a bad one
                if spec.op == "gemm":
                    assert all(len(g) == 1 for g in groups)  # wgmma on sm_90a


def test_the_representative_is_the_oldest_arch_of_its_group_in_any_order():
    from build_tools.matrix import VariantPoint

    point = VariantPoint(_spec(), {"dtype": "bfloat16"}, {}, ("sm_120f", "sm_90a", "sm_86"))
    assert lowering.representatives(point) == {"sm_120f": "sm_90a", "sm_90a": "sm_90a",
                                               "sm_86": "sm_86"}  # fmt: skip
    assert lowering.representatives(point, share=False)["sm_120f"] == "sm_120f"
