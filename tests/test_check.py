"""`python -m tileaot check`: model configs -> calls -> the runtime's verdict, without a GPU.

The verdicts are computed on a manifest written here with the default build's shape patterns
(FIXTURE below, taken from a default build's manifest.json); where an installed full wheel is
present, the same verdicts must come out of its real manifest.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

try:
    import tileaot
except ImportError:  # a source checkout: test the package in python/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import tileaot

from kernels_py.spec import BUILDABLE_ARCHS, DEFAULT_ARCHS

_arch = importlib.import_module("tileaot._arch")
_check = importlib.import_module("tileaot._check")
_manifest = importlib.import_module("tileaot._manifest")
_model_calls = importlib.import_module("tileaot._model_calls")
_main = importlib.import_module("tileaot.__main__")

ROOT = Path(__file__).resolve().parents[1]
DEEPSEEK = ROOT / "examples" / "models" / "deepseek-v3-bf16.json"
QWEN = ROOT / "examples" / "models" / "qwen1.5-moe-a2.7b.toml"

# (op, key): (tensor shapes of the generic variant, its constraints, specialisations), as in a
# default build's manifest ("shape_text" of each tensor parameter).
# The model zoo's extra bf16 sizes (kernels_py/norm/rms_norm.py ZOO_N, act/swiglu.py ZOO_H).
ZOO_N = (128, 512, 1536, 2880, 3584, 5120, 6144)
ZOO_H = (512, 768, 1408, 1536, 2560, 2816, 5632, 6400, 10944, 12288, 14336, 16384, 18432)
ZOO_H += (20480, 28672)
FIXTURE = {
    **{
        ("rms_norm", dt): (
            "x[M,N] weight[N] y[M,N]",
            {},
            [{"N": n} for n in (2048, 4096, 7168, 8192, *(ZOO_N if dt == "bf16" else ()))],
        )
        for dt in ("bf16", "fp16", "fp32")
    },
    **{
        ("gemm", dt): (
            "a[M,K] b[N,K] c[M,N]",
            {"K": 8, "N": 8},
            [{"N": 14336, "K": 4096}, {"N": 4096, "K": 4096}, {"N": 7168, "K": 2048}],
        )
        for dt in ("bf16", "fp16")
    },
    **{
        ("swiglu", dt): (
            "x[M,2 * H] y[M,H]",
            {},
            [{"H": h} for h in (2048, 4096, 7168, *(ZOO_H if dt == "bf16" else ()))],
        )
        for dt in ("bf16", "fp16", "fp32")
    },
    ("swiglu_per_token_cast_fp8", "bf16"): (
        "x[M,2 * H] weights[M] q[M,H] scale[M,H // 128]",
        {"H": 128},
        [{"H": h} for h in (2048, 4096, 7168, 18432)],
    ),
    ("per_token_cast_fp8", "bf16,g128"): (
        "x[M,N] q[M,N] scale[M,N // 128]",
        {"N": 128},
        [{"N": 4096}, {"N": 7168}],
    ),
    ("per_token_cast_fp8", "bf16,token"): ("x[M,N] q[M,N] scale[M,1]", {}, []),
    **{
        ("topk_gate", f"fp32,{s}"): (
            "scores[M,E] idx[M,K] weights[M,K]",
            {},
            [{"E": e} for e in (128, 256, 64)],
        )
        for s in ("sigmoid", "softmax")
    },
    ("top2_sum_gate", "fp32,sigmoid"): (
        "logits[M,E] bias[E] idx[M,P] weights[M,P]",
        {},
        [{"E": e} for e in (160, 256, 384)],
    ),
    ("moe_expand", "bf16"): (
        "x[T_1,H] idx[T_1,K] x_sorted[P,H] expert_offsets[E + 1] token_pos[T_1,K] "
        "chunk_counts[(T_1 * K + 1024 - 1) // 1024,E] expert_counts[E] work[T_1 * K]",
        {},
        [{"E": e} for e in (128, 256, 64)],
    ),
    ("moe_expand", "e4m3"): (
        "x[T_1,H] x_scale[T_1,H // 128] idx[T_1,K] x_sorted[P,H] x_sorted_scale[P,H // 128] "
        "expert_offsets[E + 1] token_pos[T_1,K] chunk_counts[(T_1 * K + 1024 - 1) // 1024,E] "
        "expert_counts[E] work[T_1 * K]",
        {"H": 128},
        [{"E": e} for e in (128, 256, 64)],
    ),
    **{
        ("moe_reduce", f"{y},{o},weighted"): (
            "y_sorted[P,H] token_pos[T_1,K] weights[T_1,K] out[T_1,H]",
            {},
            [],
        )
        for y in ("bf16", "fp32")
        for o in ("bf16", "fp32")
    },
}
# bf16 gemm needs bf16 tensor cores (kernels_py/gemm/gemm.py supports()).
NOT_BUILT = {("gemm", "bf16"): ("sm_70", "sm_75")}


def _specialise(dims: str, spec: dict[str, int]) -> list[list[str]]:
    """Tensor dims of a specialised variant: its sizes substituted, constant dims folded."""
    tensors = []
    for tensor in re.findall(r"\w+\[([^\]]*)\]", dims):
        out = []
        for d in tensor.split(","):
            for var, value in spec.items():
                d = re.sub(rf"\b{var}\b", str(value), d)
            out.append(str(eval(d)) if re.fullmatch(r"[\d\s+*/()-]+", d) else d)
        tensors.append(out)
    return tensors


def _spec_name(spec: dict[str, int]) -> str:
    return "_".join(f"{k.lower()}{v}" for k, v in spec.items()) or "any"


def write_manifest(path: Path, archs=DEFAULT_ARCHS, ops=("*",)) -> Path:
    """A manifest of the FIXTURE ops, in the dispatch-table order build_tools writes."""
    rows = []
    for (op, key), (dims, constraints, specs) in FIXTURE.items():
        for spec in [*specs, {}]:
            name = "_".join((op, *key.split(","), _spec_name(spec)))
            # specialised sizes are constants: only the still-dynamic ones keep constraints
            kept = {v: d for v, d in constraints.items() if v not in spec}
            params = [
                {"kind": "tensor", "name": f"t{i}", "shape_text": t}
                for i, t in enumerate(_specialise(dims, spec))
            ]
            for arch in archs:
                if arch in NOT_BUILT.get((op, key), ()):
                    continue
                row = {"name": name, "op": op, "key": key, "spec": _spec_name(spec)}
                rows.append({**row, "arch": arch, "constraints": kept, "params": params})
    order = {a: i for i, a in enumerate(DEFAULT_ARCHS)}
    rows.sort(key=lambda r: (r["op"], r["key"], r["spec"] == "any", r["name"], -order[r["arch"]]))
    path.write_text(json.dumps({"archs": list(archs), "ops": list(ops), "variants": rows}))
    return path


@pytest.fixture
def full(tmp_path):
    return _manifest.load(write_manifest(tmp_path / "manifest.json"))


def _report(config: Path, manifest, device=None):
    cfg = _model_calls.load_config(config)
    return _check.check(cfg, manifest, device or cfg.arch)


def _statuses(report) -> dict[str, str]:
    return {
        f"{v.call.op}[{v.call.key}] {v.call.text}": v.variant or v.status for v in report.verdicts
    }


# ---- the two example models -------------------------------------------------------------------


def test_deepseek_v3_on_h200_is_fully_served(full):
    """Its router (sigmoid + bias, 8 groups of which 4 stay) is top2_sum_gate's E = 256."""
    report = _report(DEEPSEEK, full)
    assert report.device == "sm_90a" and report.covered
    picks = _statuses(report)
    assert picks["rms_norm[bf16] x[4096, 7168]"] == "rms_norm_bf16_n7168"
    assert picks["rms_norm[bf16] x[4096, 1536]"] == "rms_norm_bf16_n1536"  # q_lora_rank
    assert (
        picks["top2_sum_gate[fp32,sigmoid] logits[4096, 256]"] == "top2_sum_gate_fp32_sigmoid_e256"
    )
    assert (
        picks["moe_expand[bf16] x[4096, 7168] idx[4096, 8], num_experts=256, alignment=16"]
        == "moe_expand_bf16_e256"
    )
    assert picks["swiglu[bf16] x[128, 2 * 2048]"] == "swiglu_bf16_h2048"  # 4096 * 8 / 256 rows
    assert picks["gemm[bf16] a[128, 2048] b[7168, 2048]"] == "gemm_bf16_n7168_k2048"
    assert picks["gemm[bf16] a[4096, 7168] b[576, 7168]"] == "gemm_bf16_any"  # kv_a_proj
    counts = tuple(report.count(s) for s in ("specialised", "generic", "miss", "not served"))
    assert counts == (10, 12, 0, 0)


def test_qwen_moe_misses_its_router_and_shared_expert_gate_gemms(full):
    report = _report(QWEN, full)
    assert report.device == "sm_89" and not report.covered
    miss, gate = [v for v in report.verdicts if v.status == "miss"]
    assert (gate.call.text, gate.call.uses) == ("a[4096, 2048] b[1, 2048]", ("shared_expert_gate",))
    assert (miss.call.op, miss.call.text) == ("gemm", "a[4096, 2048] b[60, 2048]")
    assert "N % 8 == 0" in miss.reason and "N = 60" in miss.reason
    assert miss.fix == {} and miss.spec == {}  # no build option serves N = 60
    assert _statuses(report)["rms_norm[bf16] x[4096, 2048]"] == "rms_norm_bf16_n2048"
    assert _check.build_options(report) == {}


def test_an_arch_not_built_names_the_arch_to_add(tmp_path):
    hopper_only = _manifest.load(write_manifest(tmp_path / "m.json", archs=("sm_90a",)))
    report = _report(QWEN, hopper_only)  # on an L4 (sm_89)
    assert report.count("miss") == len(report.verdicts)
    router = next(v for v in report.verdicts if "b[60, 2048]" in v.call.text)
    assert "runs on sm_89" in router.reason and router.fix == {"TILEAOT_ARCHS": "90a;80"}
    assert _check.build_options(report) == {"TILEAOT_ARCHS": "90a;80"}
    assert "-Ccmake.define.TILEAOT_ARCHS='90a;80'" in _check.format_report(report)


def test_blackwell_is_served_by_the_family_targets(full):
    for gpu, device, target in (
        ("B300", "sm_103", "sm_100f"),
        ("GB300", "sm_103", "sm_100f"),
        ("RTX PRO 6000", "sm_120", "sm_120f"),
        ("DGX Spark", "sm_121", "sm_120f"),
    ):
        report = _report(DEEPSEEK, full, device=gpu)
        served = [v for v in report.verdicts if v.status != "not served"]
        assert report.device == device and report.count("miss") == 0, gpu
        assert served and {v.target for v in served} == {target}, gpu


def test_a_gpu_no_sass_target_serves_gets_no_build_option(full):
    sass_only = [r for r in full.rows if not r.target.ptx]
    report = _report(
        DEEPSEEK,
        full.__class__(full.path, full.archs, full.ops, tuple(sass_only)),
        device="Jetson Thor",
    )  # 11.0: no SASS target, and no PTX in this build
    misses = [v for v in report.verdicts if v.status != "not served"]
    assert report.device == "sm_110" and report.count("miss") == len(misses) > 0
    assert all("no tileaot SASS target runs on sm_110" in v.reason for v in misses)
    assert _check.build_options(report) == {}


def test_ptx_rows_serve_a_gpu_without_sass_unless_turned_off(tmp_path):
    rows = [
        {
            "name": "rms_norm_bf16_any",
            "op": "rms_norm",
            "key": "bf16",
            "spec": "any",
            "arch": arch,
            "constraints": {"N": 8},
            "params": [
                {"kind": "tensor", "name": n, "shape_text": d}
                for n, d in (("x", ["M", "N"]), ("weight", ["N"]), ("y", ["M", "N"]))
            ],
        }
        for arch in ("sm_90a", "sm_80", "compute_80")
    ]
    path = tmp_path / "m.json"
    path.write_text(
        json.dumps({"archs": ["sm_80", "sm_90a"], "ops": ["rms_norm*"], "variants": rows})
    )
    m = _manifest.load(path)
    cfg = _model_calls.from_mapping({"hidden_size": 4096, "torch_dtype": "bfloat16"})
    thor = _check.check(cfg, m, "Jetson Thor", ptx_mode="auto")
    norms = [v for v in thor.verdicts if v.call.op == "rms_norm"]
    assert norms and all(v.target == "compute_80" and v.status == "generic" for v in norms)
    assert "the driver JIT-compiles it" in _check.format_report(thor)
    off = _check.check(cfg, m, "Jetson Thor", ptx_mode="off")
    assert all("TILEAOT_PTX=off" in v.reason for v in off.verdicts if v.call.op == "rms_norm")
    h200 = _check.check(cfg, m, "H200", ptx_mode="prefer")
    assert {v.target for v in h200.verdicts if v.call.op == "rms_norm"} == {"compute_80"}


def test_a_dtype_without_kernels_misses_only_those_ops(full):
    cfg = _model_calls.from_mapping({**_toml(QWEN), "torch_dtype": "float16"})
    fp16 = _check.check(cfg, full, "A100")
    unserved = {v.call.op for v in fp16.verdicts if v.status == "not served"}
    assert unserved == {"moe_expand", "moe_reduce"}  # every kernel is built: none has fp16
    missed = {v.call.text for v in fp16.verdicts if v.status == "miss"}
    assert missed == {"a[4096, 2048] b[60, 2048]", "a[4096, 2048] b[1, 2048]"}  # N % 8
    expand = next(v for v in fp16.verdicts if v.call.op == "moe_expand")
    assert expand.reason == (
        "not served (tileaot has no moe_expand[fp16] kernel; keys built: bf16, e4m3)"
    )


def test_an_ops_filter_names_the_glob_to_add(tmp_path):
    filtered = _manifest.load(write_manifest(tmp_path / "m.json", ops=("rms_norm*", "gemm_bf16*")))
    filtered = _drop(filtered, lambda r: r.op not in ("rms_norm", "gemm"))
    report = _report(DEEPSEEK, filtered)
    expand = next(v for v in report.verdicts if v.call.op == "moe_expand")
    assert expand.fix == {"TILEAOT_OPS": "rms_norm*,gemm_bf16*,moe_expand_bf16_*"}
    options = _check.build_options(report)["TILEAOT_OPS"].split(",")
    assert options[:2] == ["rms_norm*", "gemm_bf16*"] and "swiglu_bf16_*" in options
    assert "topk_gate_fp32_sigmoid_*" not in options  # not served: no build adds it


def test_specialised_rows_without_their_generic_ask_for_it(tmp_path):
    only_7168 = _manifest.load(write_manifest(tmp_path / "m.json", ops=("rms_norm_bf16_n7168",)))
    only_7168 = _drop(only_7168, lambda r: r.name != "rms_norm_bf16_n7168")
    report = _report(DEEPSEEK, only_7168)
    small = next(v for v in report.verdicts if v.call.text == "x[4096, 512]")
    assert small.status == "miss" and "only specialised rms_norm[bf16] variants" in small.reason
    assert small.fix == {"TILEAOT_OPS": "rms_norm_bf16_n7168,rms_norm_bf16_any"}
    assert _statuses(report)["rms_norm[bf16] x[4096, 7168]"] == "rms_norm_bf16_n7168"


def _drop(m, remove):
    return _manifest.Manifest(m.path, m.archs, m.ops, tuple(r for r in m.rows if not remove(r)))


def _toml(path: Path) -> dict:
    return pytest.importorskip("tomllib").loads(path.read_text())


# ---- the suggested build -----------------------------------------------------------------------


def test_user_config_specialises_every_served_call(full):
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads(_check.user_config(_report(QWEN, full)))
    assert config["build"] == {
        "archs": ["80"],
        "ops": ["rms_norm", "gemm", "topk_gate", "moe_expand", "swiglu", "moe_reduce"],
    }
    gemm = config["ops"]["gemm"]["specs"]
    assert {"N": 2816, "K": 2048} in gemm and {"N": 60, "K": 2048} not in gemm
    assert {"E": 60} in config["ops"]["topk_gate"]["specs"]  # any static expert count builds
    assert "moe_reduce" not in config["ops"]  # generic only: nothing to specialise


def test_user_config_is_accepted_by_the_build(full):
    userconfig = pytest.importorskip("build_tools.userconfig")
    from kernels_py import all_specs

    for model in (DEEPSEEK, QWEN):
        text = _check.user_config(_report(model, full))
        userconfig.parse(text, str(model)).apply(all_specs())  # raises ConfigError if not


# ---- the pieces: archs, matching, call layouts -------------------------------------------------


def test_buildable_archs_are_the_builds():
    assert _arch.BUILDABLE == BUILDABLE_ARCHS


@pytest.mark.parametrize(
    "text, cc",
    [
        ("sm_90a", (9, 0)),
        ("90a", (9, 0)),
        ("9.0", (9, 0)),
        ("H200", (9, 0)),
        ("sm_100a", (10, 0)),
        ("86", (8, 6)),
        ("rtx 4090", (8, 9)),
        ("12.0", (12, 0)),
    ],
)
def test_parse_device(text, cc):
    assert _arch.parse_device(text) == cc


def test_parse_device_rejects_nonsense():
    with pytest.raises(ValueError, match="unknown GPU arch 'Voodoo'"):
        _arch.parse_device("Voodoo")


@pytest.mark.parametrize(
    "cc, best",
    [
        ((8, 7), "sm_80"),  # a default target serves it (sm_86 would too, but is not default)
        ((9, 0), "sm_90a"),
        ((10, 3), "sm_100f"),
        ((12, 1), "sm_120f"),
        ((11, 0), None),  # Jetson Thor: no SASS target, only the PTX forward path
        ((7, 2), "sm_70"),
    ],
)
def test_best_buildable_follows_sass_compatibility(cc, best):
    assert _arch.best_buildable(*cc) == best


def _row(name, arch, dims, constraints=None):
    spec = "any" if name.endswith("any") else name.rsplit("_", 1)[1]
    return _manifest.Row(name, "op", "k", spec, _arch.target(arch), constraints or {}, dims)


def test_select_prefers_the_best_arch_then_table_order():
    rows = [
        _row("op_k_n8", "sm_80", ("M", "8")),
        _row("op_k_any", "sm_86", ("M", "N")),
        _row("op_k_any", "sm_80", ("M", "N")),
    ]
    assert _manifest.select(rows, 8, 9, (4, 8)).target.name == "sm_86"  # higher minor first
    assert _manifest.select(rows, 8, 0, (4, 8)).name == "op_k_n8"  # then specialised first
    assert _manifest.select(rows, 9, 0, (4, 8)) is None  # plain sm_8x never runs on 9.0


def test_match_binds_checks_and_constrains():
    row = _row("op_k_any", "sm_90a", ("M", "N", "M", "N // 128"), {"N": 128})
    assert _manifest.match(row, (3, 256, 3, 2)) == {"M": 3, "N": 256}
    assert _manifest.match(row, (3, 256, 4, 2)) is None  # M disagrees
    assert _manifest.match(row, (3, 256, 3, 3)) is None  # derived dim wrong
    assert _manifest.match(row, (3, 200, 3, 1)) is None  # N % 128
    assert _manifest.match(row, (2**31, 256, 2**31, 2)) is None  # past int32
    assert _manifest.match(row, (3, 256)) is None  # wrong count


def test_call_layouts_match_the_wrappers():
    """Each builder lays shapes out as its wrapper does (the wrappers' example calls)."""
    mc = _model_calls
    t, h, k, e = 4096, 7168, 8, 256
    built = {
        ("rms_norm", "bf16"): mc.rms_norm("bf16", 4096, 4096),
        ("gemm", "bf16"): mc.gemm("bf16", 4096, 4096, 4096),
        ("swiglu", "bf16"): mc.swiglu("bf16", 4096, 2048),
        ("swiglu_per_token_cast_fp8", "bf16"): mc.swiglu_per_token_cast_fp8("bf16", t, h),
        ("per_token_cast_fp8", "bf16,g128"): mc.per_token_cast_fp8("bf16", t, h, 128),
        ("per_token_cast_fp8", "bf16,token"): mc.per_token_cast_fp8("bf16", t, h, 0),
        ("topk_gate", "fp32,sigmoid"): mc.topk_gate("sigmoid", t, e, k),
        ("moe_expand", "bf16"): mc.moe_expand("bf16", t, h, k, e),
        ("moe_expand", "e4m3"): mc.moe_expand("e4m3", t, h, k, e),
        ("moe_reduce", "bf16,bf16,weighted"): mc.moe_reduce("bf16", t, h, k, e),
    }
    for (op, key), call in built.items():
        wrapper = importlib.import_module(f"tileaot.{op}")
        assert (call.op, call.key) == (op, key)
        assert call.shapes == wrapper.example_shapes(key)[1], op


def test_fp8_models_cast_before_their_gemms(full):
    cfg = _model_calls.from_mapping(
        {
            **json.loads(DEEPSEEK.read_text()),
            "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
        }
    )
    report = _check.check(cfg, full, "sm_90a")
    ops = {(v.call.op, v.call.key, v.call.text): v for v in report.verdicts}
    ops |= {(op, key): v for (op, key, _), v in ops.items()}  # the last of each op/key
    assert ops[("per_token_cast_fp8", "bf16,g128", "x[4096, 7168]")].status == "specialised"
    assert ops[("swiglu_per_token_cast_fp8", "bf16")].variant.startswith(
        "swiglu_per_token_cast_fp8_bf16"
    )
    assert ops[("moe_expand", "e4m3")].variant == "moe_expand_e4m3_e256"
    assert ops[("gemm", "e4m3")].reason.startswith("not served (tileaot has no gemm[e4m3] kernel")


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="no 'hidden_size'"):
        _model_calls.from_mapping({"num_experts": 8})
    with pytest.raises(ValueError, match="num_experts must be a non-negative integer"):
        _model_calls.from_mapping({"hidden_size": 64, "num_experts": "8"})
    with pytest.raises(ValueError, match="8 experts but no num_experts_per_tok"):
        _model_calls.from_mapping({"hidden_size": 64, "num_experts": 8, "intermediate_size": 64})


# ---- the command line --------------------------------------------------------------------------


def test_cli_exit_status_and_json(tmp_path, capsys):
    manifest = str(write_manifest(tmp_path / "manifest.json"))
    assert _main.main(["check", str(DEEPSEEK), "--manifest", manifest]) == 0
    assert (
        "22 calls: 10 specialised, 12 generic, 0 miss -> fully covered on sm_90a"
        in capsys.readouterr().out
    )
    saved = tmp_path / "qwen.toml"
    args = ["check", str(QWEN), "--manifest", manifest, "--json", "--save-config", str(saved)]
    assert _main.main(args) == 1
    data = json.loads(capsys.readouterr().out)
    assert saved.read_text() == data["user_config"]
    assert data["covered"] is False and data["device"] == "sm_89"
    assert [c["status"] for c in data["calls"]].count("miss") == 2
    assert _main.main(["check", str(QWEN), "--manifest", manifest, "--arch", "Voodoo"]) == 2
    assert "unknown GPU arch 'Voodoo'" in capsys.readouterr().err
    assert _main.main(["check", str(QWEN), "--manifest", str(tmp_path / "none.json")]) == 2
    assert "no tileaot manifest" in capsys.readouterr().err


def test_cmake_prefix_path(capsys):
    prefix = Path(tileaot.__file__).resolve().parent
    config = prefix / "share" / "cmake" / "tileaot" / "tileaotConfig.cmake"
    status = _main.main(["--cmake-prefix-path"])
    out, err = capsys.readouterr()
    if config.is_file():  # an installed wheel
        assert status == 0 and out.strip() == str(prefix)
    else:  # a source checkout
        assert status == 1 and "not an installed wheel" in err


# ---- the real manifest of an installed full build ----------------------------------------------


def test_installed_manifest_gives_the_same_verdicts(full):
    path = _manifest.default_path()
    if not path.is_file():
        pytest.skip(f"no installed wheel manifest at {path}")
    real = _manifest.load(path)
    if "*" not in real.ops or set(real.archs) != set(DEFAULT_ARCHS):
        pytest.skip("the installed wheel is a reduced build")
    for model in (DEEPSEEK, QWEN):
        assert _statuses(_report(model, real)) == _statuses(_report(model, full)), model


def test_info_json_is_the_inventory(monkeypatch, capsys):
    rows = [
        {"name": f"rms_norm_bf16_{s}", "op": "rms_norm", "key": "bf16", "spec": s, "arch": a}
        for s in ("n7168", "any")
        for a in ("sm_90a", "sm_80")
    ]

    def no_driver(device):
        raise RuntimeError("tileaot: CUDA driver not found (libcuda.so.1)")

    native = SimpleNamespace(
        __file__="<stand-in _C>",
        variants=lambda: rows,
        build_archs=lambda: "sm_80,sm_90a",
        build_ops=lambda: "rms_norm*",
        device_arch=no_driver,
    )
    monkeypatch.setattr(importlib.import_module("tileaot._lib"), "_native", native)
    assert _main.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    specs = {"n7168": ["sm_90a", "sm_80"], "any": ["sm_90a", "sm_80"]}
    assert data["variants"] == {"rms_norm": {"bf16": specs}}
    assert (data["archs"], data["ops"]) == (["sm_80", "sm_90a"], "rms_norm*")
    assert data["device_arch"] is None and "driver not found" in data["device_error"]
