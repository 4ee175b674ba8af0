"""The model zoo (examples/models/*.json): `python -m tileaot check`'s verdict per model and GPU.

Each config is a Hugging Face config.json (examples/models/SOURCES.md cites where its sizes
come from). The verdicts are computed on the default build's manifest (tests/test_check.py's
FIXTURE) for five GPUs; every call that is not served, or that misses, is named here, so a
change in what tileaot serves, or in how `check` reads a config, shows up as a diff of this
table. The suggested bring-your-shapes TOML of every model and GPU must pass the build's own
checks (build_tools/userconfig.py, the kernels' constraints) without tracing anything.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from test_check import write_manifest

_check = importlib.import_module("tileaot._check")
_manifest = importlib.import_module("tileaot._manifest")
_model_calls = importlib.import_module("tileaot._model_calls")

ZOO = Path(__file__).resolve().parents[1] / "examples" / "models"
GPUS = {"H200": "sm_90a", "H100": "sm_90a", "A100": "sm_80", "L40S": "sm_89", "B200": "sm_100a"}
GPUS |= {"B300": "sm_103", "RTX PRO 6000": "sm_120"}  # the family (f) targets serve these

# The linears of an fp8 checkpoint: tileaot has no fp8 gemm (gemm takes bf16 / fp16).
_MLA_FP8 = [
    f"not served gemm {use}"
    for use in (
        "q_a_proj",
        "q_b_proj",
        "kv_a_proj_with_mqa",
        "kv_b_proj",
        "o_proj",
        "mlp.gate_up_proj",
        "mlp.down_proj",
        "experts.gate_up_proj",
        "experts.down_proj",
        "shared_experts.gate_up_proj",
        "shared_experts.down_proj",
    )
]
_OFFSET_NORMS = ["not served rms_norm input_layernorm", "not served rms_norm q_norm"]
_OFFSET_NORMS += ["not served rms_norm k_norm"]
_GPT_OSS = ["not served gemm experts.gate_up_proj", "not served gemm experts.down_proj"]
_GPT_OSS += ["not served swiglu experts activation"]

# model file -> (name `check` prints, every call not served or missed: "status op first-use").
# An empty list: fully covered on every GPU of GPUS.
EXPECTED: dict[str, tuple[str, list[str]]] = {
    "deepseek-v2-lite": ("deepseek-ai/DeepSeek-V2-Lite", []),
    "deepseek-v3": ("deepseek-v3 (DeepseekV3ForCausalLM)", []),
    "deepseek-v3-bf16": ("DeepSeek-V3 (bf16 activations)", []),
    "deepseek-v3-fp8": ("deepseek-ai/DeepSeek-V3", _MLA_FP8),
    "deepseek-v3.2": ("deepseek-ai/DeepSeek-V3.2-Exp", _MLA_FP8),
    "kimi-k2": ("moonshotai/Kimi-K2-Instruct", _MLA_FP8),
    "gemma-3-27b": ("google/gemma-3-27b-it", [*_OFFSET_NORMS, "not served swiglu mlp activation"]),
    "glm-4.5": ("zai-org/GLM-4.5", []),
    "gpt-oss-20b": ("openai/gpt-oss-20b", _GPT_OSS),
    "gpt-oss-120b": ("openai/gpt-oss-120b", _GPT_OSS),
    "llama-3-8b": ("meta-llama/Meta-Llama-3-8B", []),
    "llama-3-70b": ("meta-llama/Meta-Llama-3-70B", []),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-v0.1", []),
    "mixtral-8x22b": ("mistralai/Mixtral-8x22B-v0.1", []),
    "phi-3.5-moe": (
        "microsoft/Phi-3.5-MoE-instruct",
        ["not served rms_norm input_layernorm", "not served topk_gate router top-k"],
    ),
    "qwen1.5-moe-a2.7b": (
        "Qwen/Qwen1.5-MoE-A2.7B",
        ["miss gemm router (gate)", "miss gemm shared_expert_gate"],
    ),
    "qwen2-57b-a14b": ("Qwen/Qwen2-57B-A14B", ["miss gemm shared_expert_gate"]),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", []),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B", []),
    "qwen3-next-80b-a3b": (
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        [*_OFFSET_NORMS, "miss gemm shared_expert_gate"],
    ),
}


@pytest.fixture(scope="module")
def default_build(tmp_path_factory):
    return _manifest.load(write_manifest(tmp_path_factory.mktemp("zoo") / "manifest.json"))


def _problems(report) -> list[str]:
    out = []
    for v in report.verdicts:
        if v.status in (_check.MISS, _check.UNSERVED):
            first_use = v.call.uses[0].split(",")[0]
            out.append(f"{v.status} {v.call.op} {first_use}")
    return out


def test_the_zoo_is_the_table():
    assert sorted(p.stem for p in ZOO.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("model", EXPECTED)
def test_verdicts(model, gpu, default_build):
    name, problems = EXPECTED[model]
    report = _check.check(_model_calls.load_config(ZOO / f"{model}.json"), default_build, gpu)
    assert (report.model, report.device) == (name, GPUS[gpu])
    assert sorted(_problems(report)) == sorted(problems)
    assert report.covered == (not problems)
    text = _check.format_report(report)
    for v in report.verdicts:  # a verdict says why: the fix, or what tileaot lacks
        if v.status == _check.UNSERVED:
            assert v.reason.startswith("not served (tileaot has no ") and not v.fix
            assert f"      {v.reason}" in text


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("model", EXPECTED)
def test_suggested_config_builds(model, gpu, default_build):
    """The TOML of --save-config passes the build's checks, kernel constraints included."""
    userconfig = pytest.importorskip("build_tools.userconfig")
    from kernels_py import all_specs
    from kernels_py import spec as spec_module

    report = _check.check(_model_calls.load_config(ZOO / f"{model}.json"), default_build, gpu)
    text = _check.user_config(report)
    specs = userconfig.parse(text, model).apply(all_specs())  # ConfigError if not
    for spec in specs:
        for key in spec.keys:
            for s in spec.specs:
                if any(spec.supports(a, key, s) for a in spec_module.BUILDABLE_ARCHS):
                    assert userconfig.buildable_why_not(spec.op, spec.key_string(key), s) is None


def test_real_model_sizes_the_kernels_cannot_specialise_are_left_to_the_generic(default_build):
    """A bf16 hidden size that is not a whole number of 16-byte vectors (rms_norm) is left to
    the generic; gpt-oss's N = 2880 specialises now, and so does Mixtral's E = 8."""
    tomllib = pytest.importorskip("tomllib")
    mixtral = _model_calls.load_config(ZOO / "mixtral-8x7b.json")
    text = _check.user_config(_check.check(mixtral, default_build, "H200"))
    assert {"E": 8} in tomllib.loads(text)["ops"]["topk_gate"]["specs"]
    gpt_oss = json.loads((ZOO / "gpt-oss-20b.json").read_text())
    report = _check.check(_model_calls.from_mapping(gpt_oss), default_build, "H200")
    norm = next(v for v in report.verdicts if v.call.op == "rms_norm")
    assert norm.status == "specialised" and norm.variant == "rms_norm_bf16_n2880"
    odd = _model_calls.from_mapping({**gpt_oss, "hidden_size": 2884})
    report = _check.check(odd, default_build, "H200")
    norm = next(v for v in report.verdicts if v.call.op == "rms_norm")
    assert norm.status == "generic" and norm.spec == {}
    assert "a static N must be a multiple of 8 (16 bytes); got 2884" in norm.unbuildable
    assert "got 2884" in _check.format_report(report)


@pytest.mark.parametrize("gpu", GPUS)
def test_the_default_build_specialises_every_served_norm_and_swiglu(gpu, default_build):
    """Issue 20 item 4 for rms_norm and swiglu: no zoo model runs their generic variant."""
    generic = []
    for model in EXPECTED:
        report = _check.check(_model_calls.load_config(ZOO / f"{model}.json"), default_build, gpu)
        for v in report.verdicts:
            if v.call.op in ("rms_norm", "swiglu") and v.status != _check.UNSERVED:
                if v.status != "specialised":
                    generic.append(f"{model}: {v.call.op} {v.call.text} {v.status}")
    assert generic == []


def test_routing_defaults_follow_the_config_classes():
    """transformers' DeepseekV3Config / Glm4MoeConfig write no scoring_func: sigmoid, biased."""
    for model in ("deepseek-v3", "glm-4.5"):
        data = json.loads((ZOO / f"{model}.json").read_text())
        assert "scoring_func" not in data
        moe = _model_calls.from_mapping(data).moe
        assert moe is not None and (moe.scoring, moe.bias) == ("sigmoid", True)
    lite = _model_calls.from_mapping(json.loads((ZOO / "deepseek-v2-lite.json").read_text()))
    assert lite.moe is not None and (lite.moe.scoring, lite.moe.bias, lite.moe.groups) == (
        "softmax",
        False,
        None,
    )


_BIASED = {"scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": True}


@pytest.mark.parametrize(
    "change, op, gap",
    [
        ({"num_experts_per_tok": 33}, "topk_gate", "topk_gate takes k <= 32"),
        ({"n_routed_experts": 1024}, "topk_gate", "E <= 512"),
        (
            {"n_group": 8, "topk_group": 4},
            "top2_sum_gate",
            "softmax scores with group-limited top-k: top2_sum_gate scores by sigmoid",
        ),
        ({**_BIASED, "norm_topk_prob": False}, "top2_sum_gate", "norm_topk_prob = false"),
        (_BIASED, "top2_sum_gate", None),  # V2-Lite's sizes routed as DeepSeek-V3: generic E
        ({**_BIASED, "n_group": 8, "topk_group": 4}, "top2_sum_gate", None),
        ({**_BIASED, "n_group": 64, "topk_group": 8}, "top2_sum_gate", "at most 32 groups"),
        ({**_BIASED, "n_group": 16, "topk_group": 1}, "top2_sum_gate", "k within the kept"),
        ({**_BIASED, "num_experts_per_tok": 40}, "top2_sum_gate", "takes k <= 32"),
        ({"hidden_act": "gelu"}, "topk_gate", None),
    ],
)
def test_routing_limits(change, op, gap, default_build):
    """A router with a correction bias or groups is top2_sum_gate's, served within its limits."""
    base = json.loads((ZOO / "deepseek-v2-lite.json").read_text())
    report = _check.check(_model_calls.from_mapping({**base, **change}), default_build, "H200")
    (gate,) = [v for v in report.verdicts if v.call.uses == ("router top-k",)]
    assert gate.call.op == op
    if gap is None:
        assert gate.status != _check.UNSERVED, gate.reason
    else:
        assert gate.status == _check.UNSERVED and gap in gate.reason, gate.reason


def test_deepseek_v3_router_is_top2_sum_gate_and_needs_its_variant(default_build, tmp_path):
    """Served by the specialised E = 256 variant; a full build without the op says so."""
    cfg = _model_calls.load_config(ZOO / "deepseek-v3.json")
    (gate,) = [
        v
        for v in _check.check(cfg, default_build, "H200").verdicts
        if "router top-k" in v.call.uses
    ]
    assert (gate.call.op, gate.status, gate.variant) == (
        "top2_sum_gate",
        "specialised",
        "top2_sum_gate_fp32_sigmoid_e256",
    )
    path = write_manifest(tmp_path / "manifest.json")
    data = json.loads(path.read_text())
    data["variants"] = [r for r in data["variants"] if r["op"] != "top2_sum_gate"]
    path.write_text(json.dumps(data))
    older = _manifest.load(path)
    (gate,) = [
        v for v in _check.check(cfg, older, "H200").verdicts if "router top-k" in v.call.uses
    ]
    assert gate.status == _check.UNSERVED
    assert "no top2_sum_gate[fp32,sigmoid] kernel; no such op in this build" in gate.reason


def test_op_limits_are_the_kernels():
    """_model_calls / _buildable state the kernels' limits: they must be the kernels' own."""
    pytest.importorskip("kernels_py")
    topk = importlib.import_module("kernels_py.moe.topk_gate")
    expand = importlib.import_module("kernels_py.moe.moe_expand")
    buildable = importlib.import_module("tileaot._buildable")
    assert (_model_calls.TOPK_MAX_K, _model_calls.TOPK_MAX_E) == (topk.MAX_K, topk.MAX_E)
    assert _model_calls.EXPAND_MAX_E == expand.E_MAX == buildable.EXPAND_MAX_E
    assert buildable.TOPK_MAX_E == topk.MAX_E
    top2 = importlib.import_module("kernels_py.moe.top2_sum_gate")
    assert (top2.MAX_P, top2.MAX_E, top2.MAX_GROUPS) == (
        _model_calls.TOPK_MAX_K,
        _model_calls.TOPK_MAX_E,
        _model_calls.GROUPS_MAX,
    )


@pytest.mark.parametrize("model", EXPECTED)
def test_configs_written_by_transformers_read_the_same(model, default_build):
    """Each config re-written by its transformers config class (newer field names: dtype,
    num_local_experts, rope_parameters) gets the same verdicts. Needs transformers."""
    configuration = pytest.importorskip("transformers.models.auto.configuration_auto")
    data = json.loads((ZOO / f"{model}.json").read_text())
    try:
        cls = configuration.CONFIG_MAPPING[data["model_type"]]  # a lazy mapping: no .get
    except KeyError:
        pytest.skip(f"transformers has no config class for {data['model_type']}")
    written = cls(**{k: v for k, v in data.items() if k != "_name_or_path"}).to_dict()
    written["_name_or_path"] = data.get("_name_or_path", "")
    for kept in ("name", "head_dim"):  # tileaot's own key; GLM's head_dim (not a v5 field)
        if kept in data:
            written[kept] = data[kept]
    ours = _check.check(_model_calls.from_mapping(data), default_build, "H200")
    theirs = _check.check(_model_calls.from_mapping(written), default_build, "H200")
    assert [(v.call, v.status) for v in theirs.verdicts] == [
        (v.call, v.status) for v in ours.verdicts
    ]


def test_quantisation_configs(default_build):
    """fp8 blocks other than 128 columns, and weight formats no gemm takes, are not served."""
    base = json.loads((ZOO / "qwen3-30b-a3b.json").read_text())
    fp8_64 = {"quant_method": "fp8", "weight_block_size": [128, 64]}
    report = _check.check(
        _model_calls.from_mapping({**base, "quantization_config": fp8_64}), default_build, "H200"
    )
    casts = [v for v in report.verdicts if v.call.op == "per_token_cast_fp8"]
    assert casts and all(v.call.key == "bf16,g64" and v.status == "not served" for v in casts)
    fused = [v for v in report.verdicts if v.call.op == "swiglu_per_token_cast_fp8"]
    assert fused and all("groups of 64" in v.reason for v in fused)
    (expand,) = [v for v in report.verdicts if v.call.op == "moe_expand"]
    assert "fp8 scales in groups of 64" in expand.reason
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    report = _check.check(
        _model_calls.from_mapping({**base, "quantization_config": gptq}), default_build, "H200"
    )
    gemms = {v.call.uses[0]: v for v in report.verdicts if v.call.op == "gemm"}
    assert "gptq-quantised weights" in gemms["q_proj"].reason
    assert gemms["lm_head"].status != "not served"  # kept in bf16 by quantised checkpoints
