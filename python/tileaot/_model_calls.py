"""A model's config -> the tileaot calls of its forward pass (for `python -m tileaot check`).

The config is a Hugging Face config.json (or the same keys in TOML): hidden_size,
intermediate_size, moe_intermediate_size, n_routed_experts / num_experts / num_local_experts,
num_experts_per_tok, n_shared_experts / shared_expert_intermediate_size, scoring_func,
num_attention_heads / num_key_value_heads / head_dim, the MLA ranks (q_lora_rank,
kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim), vocab_size, torch_dtype (or
dtype) and quantization_config (fp8 with weight_block_size -> fp8 activations in groups of
its column block; mxfp4 -> expert weights in MXFP4). Two keys are tileaot's own: `arch` (the
GPU: "sm_90a", "9.0", "H200") and `tokens` (rows per call, default 4096). A multimodal config
(Gemma 3) is read through its `text_config`.

What the model really computes is read from its config and, where the config leaves it out,
from its transformers config class's defaults (`model_type`):

- routing: `scoring_func` (DeepseekV3Config and Glm4MoeConfig write none and both models use
  sigmoid), a correction bias on the selection (`topk_method = "noaux_tc"`; always in DeepSeek-V3,
  Kimi-K2 and GLM-4.5), group-limited top-k (`n_group`/`topk_group`), `norm_topk_prob`,
  PhiMoE's sparsemixer, and the ops' limits: a router with a bias or groups is top2_sum_gate's
  (sigmoid scores, groups ranked by their top-2 sums, renormalised weights; k <= 32, E <= 512,
  at most 32 groups), any other topk_gate's (k <= 32, E <= 512);
- the activation (`hidden_act`/`hidden_activation`: SiLU -> SwiGLU; GELU -> GeGLU; gpt-oss's
  clamped SwiGLU), the norm (RMSNorm; Gemma's and Qwen3-Next's (1 + weight) RMSNorm; PhiMoE's
  LayerNorm), per-head q_norm/k_norm (Qwen3, Qwen3-Next, Gemma 3, GLM-4.5 `use_qk_norm`),
  shared experts (and Qwen2-MoE's sigmoid gate on them) and dense layers.

A call tileaot has no kernel for is still listed, with `unserved` saying what is missing: the
check reports it "not served" (no build adds it). Attention itself, embeddings and rotary
embeddings are not tileaot ops and are not listed.

A call's shapes are laid out as its Python wrapper passes them to the runtime (all tensor
dims, concatenated): for ops with a schema the layout is the schema's (`OpSchema.flat`); for
the others tests/test_check.py holds each builder to its wrapper's example_shapes.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FP8_GROUP = 128  # columns per scale of per-token/fused fp8 casts
MOE_ALIGNMENT = 16  # moe_expand's default row alignment per expert
# The ops' limits (kernels_py/moe/topk_gate.py MAX_K, MAX_E, the same in top2_sum_gate.py;
# kernels_py/moe/moe_expand.py E_MAX;
# tests/test_model_zoo.py holds them to the kernels').
TOPK_MAX_K, TOPK_MAX_E, EXPAND_MAX_E = 32, 512, 1024
GROUPS_MAX = 32  # top2_sum_gate's expert groups (kernels_py/moe/top2_sum_gate.py MAX_GROUPS)
_DTYPES = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp16": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "fp32": "fp32",
}


@dataclass(frozen=True)
class Call:
    """One runtime call: op, dispatch key and flat shapes, as the Python wrapper makes it."""

    op: str
    key: str
    shapes: tuple[int, ...]
    text: str  # the call's main operands, e.g. "x[4096, 7168]"
    uses: tuple[str, ...]  # where the model makes it, e.g. ("input_layernorm",)
    unserved: str = ""  # what tileaot has no kernel for, if it has none for this call


@dataclass(frozen=True)
class ModelConfig:
    name: str
    hidden: int
    dtype: str  # dispatch-key name of the activations: "bf16", "fp16", "fp32" (or as given)
    arch: str | None  # the GPU as written in the config, if it names one
    tokens: int
    projections: tuple[tuple[str, int, int], ...]  # attention + lm_head linears: (use, N, K)
    norms: tuple[tuple[str, int], ...]  # rms_norm sizes: (use, N)
    dense_intermediate: int | None  # a dense SwiGLU MLP's width, if the model has one
    moe: Moe | None  # the mixture-of-experts layers, if any
    fp8_group: int | None  # fp8 activations: scale per this many columns, 0 per token; None: off
    norm: str = "rms"  # "rms", "rms_offset" (x * (1 + weight)), "layer" (LayerNorm)
    activation: str = "swiglu"  # "swiglu", "geglu", "clamped_swiglu" (gpt-oss), or as written
    qk_norm: tuple[int, int, int] | None = None  # (heads, kv_heads, head_dim) of q/k_norm
    weight_quant: str = ""  # quantised weights tileaot has no gemm for: "mxfp4", "gptq", ...
    expert_weights_only: bool = False  # weight_quant applies to the experts only (gpt-oss)


@dataclass(frozen=True)
class Moe:
    experts: int
    top_k: int
    intermediate: int  # each expert's SwiGLU width
    shared_intermediate: int | None  # shared experts, as one SwiGLU MLP of this width
    scoring: str  # "softmax", "sigmoid", or as written ("sparsemixer")
    bias: bool = False  # selection on score + e_score_correction_bias (noaux_tc)
    groups: tuple[int, int] | None = None  # (n_group, topk_group) of group-limited top-k
    shared_gate: bool = False  # a sigmoid gate (a linear to 1 output) on the shared expert
    renormalize: bool = True  # norm_topk_prob: the k weights divided by their sum


# transformers' config classes whose model routes on sigmoid scores with a correction bias
# (e_score_correction_bias; DeepseekV3Config and Glm4MoeConfig write no scoring_func).
_SIGMOID_BIASED = ("deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe")
# ... whose RMSNorm scales by (1 + weight), computed in float32 (GemmaRMSNorm, Qwen3NextRMSNorm).
_OFFSET_NORM = ("gemma", "gemma2", "gemma3", "gemma3_text", "qwen3_next")
# (n_group, topk_group) a config class writes when the config leaves them out.
_GROUP_DEFAULTS = {"deepseek_v3": (8, 4), "deepseek_v32": (8, 4), "glm4_moe": (1, 1)}
_LAYER_NORM = ("phimoe",)  # nn.LayerNorm, with bias
_QK_NORM = ("qwen3", "qwen3_moe", "qwen3_next", "gemma3", "gemma3_text")  # always q/k_norm
_SHARED_GATE = ("qwen2_moe", "qwen3_next")  # sigmoid(shared_expert_gate(x)) * shared_expert(x)
_SWIGLU_ACTS = ("silu", "swish", "swiglu")


def load_config(path: str | Path) -> ModelConfig:
    """Read a model config (.json, or .toml) and interpret it; ValueError names what is wrong."""
    path = Path(path)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ValueError(
            f"{path}: not a text file; give a Hugging Face config.json or a TOML model config"
        ) from None
    if path.suffix == ".toml":
        data = _loads_toml(text, path)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            hint = " (a TOML file? name it *.toml)" if path.suffix != ".json" else ""
            raise ValueError(
                f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}){hint}; "
                "give a Hugging Face config.json, or a TOML model config named *.toml"
            ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a model config must be a JSON object / TOML table")
    return from_mapping(data, default_name=path.stem)


def _loads_toml(text: str, path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ValueError(
                f"{path}: reading TOML needs Python >= 3.11 or `pip install tomli`"
            ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML ({e}); give a TOML model config") from None


def from_mapping(d: Mapping[str, Any], default_name: str = "model") -> ModelConfig:
    """Interpret config keys (Hugging Face names; see the module docstring)."""
    d = _text_config(d)
    hidden = _int(d, "hidden_size")
    if not hidden:
        raise ValueError("the model config has no 'hidden_size' (a positive integer)")
    model_type = str(d.get("model_type") or "")
    moe = _moe_config(d, model_type)
    # A MoE config's intermediate_size is the dense layers' width only where it has dense
    # layers (DeepSeek: first_k_dense_replace; Qwen-MoE: mlp_only_layers).
    has_dense = moe is None or (
        _int(d, "moe_intermediate_size") is not None
        and bool(
            _int(d, "first_k_dense_replace")
            or d.get("mlp_only_layers")
            or (_int(d, "decoder_sparse_step") or 1) > 1
        )
    )
    dtype = str(d.get("dtype") or d.get("torch_dtype") or "bfloat16")
    quant = d.get("quantization_config")
    weight_quant = _weight_quant(quant)
    return ModelConfig(
        name=_name(d, default_name),
        hidden=hidden,
        dtype=_DTYPES.get(dtype.removeprefix("torch."), dtype),
        arch=str(d["arch"]) if d.get("arch") else None,
        tokens=_int(d, "tokens") or 4096,
        projections=tuple(_projections(d, hidden)),
        norms=tuple(_norms(d, hidden, model_type)),
        dense_intermediate=_int(d, "intermediate_size") if has_dense else None,
        moe=moe,
        fp8_group=_fp8_group(quant),
        norm=(
            "rms_offset"
            if model_type in _OFFSET_NORM
            else "layer"
            if model_type in _LAYER_NORM
            else "rms"
        ),
        activation=_activation(d, model_type),
        qk_norm=_qk_norm(d, hidden, model_type),
        weight_quant=weight_quant,
        expert_weights_only=weight_quant == "mxfp4",
    )


def _text_config(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal config (Gemma 3): its language model's keys, with the top level's names."""
    text = d.get("text_config")
    if "hidden_size" in d or not isinstance(text, Mapping):
        return d
    kept = ("name", "arch", "tokens", "_name_or_path", "architectures", "quantization_config")
    top = {k: d[k] for k in (*kept, "torch_dtype", "dtype") if k in d}
    return {**text, **top}


def _name(d: Mapping[str, Any], default_name: str) -> str:
    """`name` (tileaot's key), `_name_or_path`, else the file's stem and the architecture."""
    if d.get("name") or d.get("_name_or_path"):
        return str(d.get("name") or d.get("_name_or_path"))
    archs = d.get("architectures")
    arch = str(archs[0]) if isinstance(archs, list) and archs else str(d.get("model_type") or "")
    if default_name in ("config", "model") and arch:
        return arch
    return f"{default_name} ({arch})" if arch else default_name


def _activation(d: Mapping[str, Any], model_type: str) -> str:
    if model_type == "gpt_oss":
        return "clamped_swiglu"
    act = str(d.get("hidden_activation") or d.get("hidden_act") or "silu").lower()
    if act in _SWIGLU_ACTS:
        return "swiglu"
    return "geglu" if act.startswith("gelu") else act


def _qk_norm(d: Mapping[str, Any], hidden: int, model_type: str) -> tuple[int, int, int] | None:
    heads = _int(d, "num_attention_heads")
    if not heads or not (model_type in _QK_NORM or d.get("use_qk_norm") is True):
        return None
    head_dim = _int(d, "head_dim") or hidden // heads
    return heads, _int(d, "num_key_value_heads") or heads, head_dim


def _moe_config(d: Mapping[str, Any], model_type: str = "") -> Moe | None:
    experts = _first_int(d, ("n_routed_experts", "num_experts", "num_local_experts"))
    if not experts:
        return None
    top_k = _first_int(d, ("num_experts_per_tok", "num_experts_per_token", "experts_per_token"))
    width = _first_int(d, ("moe_intermediate_size", "intermediate_size"))
    if not (top_k and width):
        raise ValueError(
            f"the model config has {experts} experts but no num_experts_per_tok or no "
            "moe_intermediate_size/intermediate_size: give both (positive integers)"
        )
    shared = _int(d, "shared_expert_intermediate_size")
    if shared is None:
        shared = (_int(d, "n_shared_experts") or 0) * width or None
    default = "sigmoid" if model_type in _SIGMOID_BIASED else "softmax"
    if model_type == "phimoe":
        default = "sparsemixer"
    scoring = str(d.get("scoring_func") or default)
    method = d.get("topk_method")
    bias = method == "noaux_tc" if method else model_type in _SIGMOID_BIASED
    n_group, topk_group = _GROUP_DEFAULTS.get(model_type, (1, 0))
    n_group = _int(d, "n_group") or n_group
    topk_group = _int(d, "topk_group") or topk_group
    grouped = n_group > 1 and (method == "group_limited_greedy" or 0 < topk_group < n_group)
    groups = (n_group, topk_group) if grouped else None
    gate = model_type in _SHARED_GATE and bool(shared)
    renormalize = d.get("norm_topk_prob", True) is not False
    return Moe(experts, top_k, width, shared, scoring, bias, groups, gate, renormalize)


def _int(d: Mapping[str, Any], key: str) -> int | None:
    value = d.get(key)
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise ValueError(f"{key} must be a non-negative integer; got {value!r}")
    return value


def _first_int(d: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    return next((v for v in (_int(d, k) for k in keys) if v), None)


def _fp8_group(quant: Any) -> int | None:
    """fp8 activations (DeepSeek-V3 style: dynamic per-token scales per weight column block)."""
    if not isinstance(quant, Mapping) or quant.get("quant_method") != "fp8":
        return None
    block = quant.get("weight_block_size")
    return int(block[1]) if isinstance(block, list) and len(block) == 2 else 0


def _weight_quant(quant: Any) -> str:
    """Quantised weights no tileaot gemm takes ("mxfp4", "gptq", ...); "" for none or fp8."""
    if not isinstance(quant, Mapping):
        return ""
    method = str(quant.get("quant_method") or "")
    return "" if method in ("", "fp8") else method


def _norms(d: Mapping[str, Any], hidden: int, model_type: str = "") -> Iterator[tuple[str, int]]:
    if model_type.startswith("gemma"):  # Gemma 2/3: a norm before and after each sub-layer
        use = "input_layernorm, post_attention_layernorm, pre/post_feedforward_layernorm, norm"
    else:
        use = "input_layernorm, post_attention_layernorm, norm"
    yield use, hidden
    for key, use in (("q_lora_rank", "q_a_layernorm"), ("kv_lora_rank", "kv_a_layernorm")):
        rank = _int(d, key)
        if rank:
            yield use, rank


def _projections(d: Mapping[str, Any], hidden: int) -> Iterator[tuple[str, int, int]]:
    """Attention linears (plain multi-head or DeepSeek's MLA) and the LM head: (use, N, K)."""
    heads = _int(d, "num_attention_heads")
    if heads and _int(d, "kv_lora_rank"):
        yield from _mla(d, hidden, heads)
    elif heads:
        head_dim = _int(d, "head_dim") or hidden // heads
        kv = (_int(d, "num_key_value_heads") or heads) * head_dim
        yield "q_proj", heads * head_dim, hidden
        yield "k_proj, v_proj", kv, hidden
        yield "o_proj", hidden, heads * head_dim
    vocab = _int(d, "vocab_size")
    if vocab:
        yield "lm_head", vocab, hidden


def _mla(d: Mapping[str, Any], hidden: int, heads: int) -> Iterator[tuple[str, int, int]]:
    nope, rope = _int(d, "qk_nope_head_dim") or 0, _int(d, "qk_rope_head_dim") or 0
    v_dim, q_rank = _int(d, "v_head_dim") or 0, _int(d, "q_lora_rank")
    kv_rank = _int(d, "kv_lora_rank") or 0
    if q_rank:
        yield "q_a_proj", q_rank, hidden
        yield "q_b_proj", heads * (nope + rope), q_rank
    else:
        yield "q_proj", heads * (nope + rope), hidden
    yield "kv_a_proj_with_mqa", kv_rank + rope, hidden
    yield "kv_b_proj", heads * (nope + v_dim), kv_rank
    yield "o_proj", hidden, heads * v_dim


# ---- the calls --------------------------------------------------------------------------------


def calls(cfg: ModelConfig) -> list[Call]:
    """Every distinct call of one forward pass; calls made at several places list them all."""
    merged: dict[tuple[str, str, tuple[int, ...], str], Call] = {}
    for call in _all_calls(cfg):
        ident = (call.op, call.key, call.shapes, call.unserved)
        seen = merged.get(ident)
        merged[ident] = call if seen is None else _merge_uses(seen, call)
    return list(merged.values())


def _merge_uses(a: Call, b: Call) -> Call:
    uses = tuple(dict.fromkeys(a.uses + b.uses))
    return dataclasses.replace(a, uses=uses)


def _unserved(call: Call, why: str) -> Call:
    return dataclasses.replace(call, unserved=why) if why and not call.unserved else call


def _norm_gap(cfg: ModelConfig) -> str:
    if cfg.norm == "rms_offset":
        return (
            "an RMSNorm scaling by (1 + weight) in float32 (Gemma / Qwen3-Next): rms_norm "
            "scales by the weight as stored"
        )
    if cfg.norm == "layer":
        return "LayerNorm (mean and bias): rms_norm has neither"
    return ""


def _all_calls(cfg: ModelConfig) -> Iterator[Call]:
    t, dt = cfg.tokens, cfg.dtype
    for use, n in cfg.norms:
        yield _unserved(rms_norm(dt, t, n, use), _norm_gap(cfg))
    if cfg.qk_norm is not None:
        heads, kv_heads, head_dim = cfg.qk_norm
        for use, rows in (("q_norm", t * heads), ("k_norm", t * kv_heads)):
            yield _unserved(rms_norm(dt, rows, head_dim, use), _norm_gap(cfg))
    for use, n, k in cfg.projections:
        if use == "lm_head":  # kept in the activation dtype by quantised checkpoints
            yield gemm(dt, t, n, k, use)
        else:
            yield from _linear(cfg, t, n, k, use)
    if cfg.dense_intermediate:
        yield from _mlp(cfg, t, cfg.dense_intermediate, "mlp")
    if cfg.moe is not None:
        yield from _moe(cfg, cfg.moe)


def _quant_gap(cfg: ModelConfig, experts: bool) -> str:
    """Why no tileaot gemm takes these weights ("" if one does)."""
    if not cfg.weight_quant or (cfg.expert_weights_only and not experts):
        return ""
    what = "MXFP4" if cfg.weight_quant == "mxfp4" else f"{cfg.weight_quant}-quantised"
    return f"{what} weights (gemm takes bf16 or fp16 operands)"


def _linear(
    cfg: ModelConfig,
    m: int,
    n: int,
    k: int,
    use: str,
    quantised: bool = False,
    experts: bool = False,
) -> Iterator[Call]:
    """A linear layer; with fp8 activations its input is cast first (unless it already is)."""
    gap = _quant_gap(cfg, experts)
    if cfg.fp8_group is None or gap:
        yield _unserved(gemm(cfg.dtype, m, n, k, use), gap)
        return
    if not quantised:
        yield per_token_cast_fp8(cfg.dtype, m, k, cfg.fp8_group, f"{use} input")
    yield gemm("e4m3", m, n, k, use)


def _activation_gap(cfg: ModelConfig) -> str:
    if cfg.activation == "swiglu":
        return ""
    if cfg.activation == "clamped_swiglu":
        return (
            "gpt-oss's clamped SwiGLU (gate clamped to swiglu_limit, up to +-swiglu_limit, "
            "gate * sigmoid(1.702 * gate) * (up + 1), gate/up interleaved): swiglu is "
            "silu(gate) * up"
        )
    if cfg.activation == "geglu":
        return "GeGLU (gelu(gate) * up): swiglu is silu(gate) * up"
    return f"a gated MLP with activation {cfg.activation!r}: swiglu is silu(gate) * up"


def _mlp(cfg: ModelConfig, m: int, width: int, use: str, routed: bool = False) -> Iterator[Call]:
    """gate_up -> SwiGLU (fused with the fp8 cast if fp8) -> down."""
    yield from _linear(
        cfg, m, 2 * width, cfg.hidden, f"{use}.gate_up_proj", quantised=routed, experts=routed
    )
    act = _activation_gap(cfg)
    if cfg.fp8_group is None or _quant_gap(cfg, routed):
        yield _unserved(swiglu(cfg.dtype, m, width, f"{use} activation"), act)
    else:
        fused = swiglu_per_token_cast_fp8(cfg.dtype, m, width, f"{use} activation")
        if cfg.fp8_group != FP8_GROUP:
            act = act or f"an fp8 cast in groups of {cfg.fp8_group} (the fused cast has 128)"
        yield _unserved(fused, act)
    yield from _linear(
        cfg, m, cfg.hidden, width, f"{use}.down_proj", quantised=True, experts=routed
    )


def _routing_gap(moe: Moe) -> str:
    """What of the model's routing topk_gate lacks ("" if it serves it)."""
    if moe.scoring not in ("softmax", "sigmoid"):
        what = "PhiMoE's sparsemixer" if moe.scoring == "sparsemixer" else repr(moe.scoring)
        return f"{what} routing: topk_gate scores by softmax or sigmoid"
    if moe.top_k > TOPK_MAX_K or moe.experts > TOPK_MAX_E:
        return (
            f"top-{moe.top_k} of {moe.experts} experts: topk_gate takes k <= {TOPK_MAX_K} "
            f"and E <= {TOPK_MAX_E}"
        )
    return ""


def _biased_routing_gap(moe: Moe) -> str:
    """What of a router with a correction bias or expert groups top2_sum_gate lacks ("" if
    it serves it: kernels_py/moe/top2_sum_gate.py)."""
    parts = (["group-limited top-k"] if moe.groups else []) + (["a bias"] if moe.bias else [])
    what = "with " + " and ".join(parts)
    if moe.scoring != "sigmoid":
        return f"{moe.scoring} scores {what}: top2_sum_gate scores by sigmoid"
    if not moe.renormalize:
        return f"unnormalised weights {what} (norm_topk_prob = false): top2_sum_gate renormalises"
    if moe.top_k > TOPK_MAX_K or moe.experts > TOPK_MAX_E:
        return (
            f"top-{moe.top_k} of {moe.experts} experts {what}: top2_sum_gate takes k <= "
            f"{TOPK_MAX_K} and E <= {TOPK_MAX_E}"
        )
    if moe.groups:
        n, g = moe.groups
        size = moe.experts // n if n else 0
        if n > GROUPS_MAX or moe.experts % n or size < 2 or moe.top_k > g * size:
            return (
                f"n_group = {n}, topk_group = {g} over {moe.experts} experts, k = {moe.top_k}: "
                f"top2_sum_gate takes at most {GROUPS_MAX} groups of >= 2 experts dividing E, "
                "and k within the kept groups"
            )
    return ""


def _router(cfg: ModelConfig, moe: Moe) -> Call:
    """The router's top-k: top2_sum_gate with a correction bias or groups, else topk_gate."""
    t, e, k = cfg.tokens, moe.experts, moe.top_k
    if moe.bias or moe.groups:
        return _unserved(top2_sum_gate(t, e, k, "router top-k"), _biased_routing_gap(moe))
    scoring = moe.scoring if moe.scoring in ("softmax", "sigmoid") else "softmax"
    return _unserved(topk_gate(scoring, t, e, k, "router top-k"), _routing_gap(moe))


def _moe(cfg: ModelConfig, moe: Moe) -> Iterator[Call]:
    t, h, e, k = cfg.tokens, cfg.hidden, moe.experts, moe.top_k
    yield gemm(cfg.dtype, t, e, h, "router (gate)")
    yield _router(cfg, moe)
    fp8 = cfg.fp8_group is not None and not _quant_gap(cfg, experts=True)
    gap = f"more than {EXPAND_MAX_E} experts" if e > EXPAND_MAX_E else ""
    if fp8:
        group = cfg.fp8_group or 0
        yield per_token_cast_fp8(cfg.dtype, t, h, group, "expert input")
        if group != FP8_GROUP:
            scales = f"groups of {group}" if group else "one per token"
            gap = gap or f"fp8 scales in {scales} (moe_expand's e4m3 carries one per 128 columns)"
    expand = moe_expand("e4m3" if fp8 else cfg.dtype, t, h, k, e, "dispatch")
    yield _unserved(expand, gap)
    rows = max(1, math.ceil(t * k / e))  # an expert's average share of the routed rows
    yield from _mlp(cfg, rows, moe.intermediate, "experts", routed=True)
    if moe.shared_intermediate:
        yield from _mlp(cfg, t, moe.shared_intermediate, "shared_experts")
        if moe.shared_gate:
            yield gemm(cfg.dtype, t, 1, h, "shared_expert_gate")
    yield moe_reduce(cfg.dtype, t, h, k, e, "combine")


# ---- one builder per op: the wrapper's flat shape layout --------------------------------------


def _from_schema(op: str, key: str, use: str, **dims: int) -> Call:
    """A call of an op with a schema (tileaot/_schema.py): its layout is the schema's."""
    schema = importlib.import_module(f"{__package__}.{op}").SCHEMA
    return Call(op, key, schema.flat(dims, key), schema.describe(dims, key), (use,))


def rms_norm(dt: str, m: int, n: int, use: str = "") -> Call:
    return _from_schema("rms_norm", dt, use, M=m, N=n)


def gemm(dt: str, m: int, n: int, k: int, use: str = "") -> Call:
    return _from_schema("gemm", dt, use, M=m, N=n, K=k)


def swiglu(dt: str, m: int, h: int, use: str = "") -> Call:
    return _from_schema("swiglu", dt, use, M=m, H=h)


def swiglu_per_token_cast_fp8(dt: str, m: int, h: int, use: str = "") -> Call:
    return _from_schema("swiglu_per_token_cast_fp8", dt, use, M=m, H=h)


def per_token_cast_fp8(dt: str, m: int, n: int, group: int, use: str = "") -> Call:
    key = f"{dt},g{group}" if group else f"{dt},token"
    return _from_schema("per_token_cast_fp8", key, use, M=m, N=n, G=n // group if group else 1)


def topk_gate(scoring: str, m: int, e: int, k: int, use: str = "") -> Call:
    return _from_schema("topk_gate", f"fp32,{scoring}", use, T=m, E=e, K=k)


def top2_sum_gate(m: int, e: int, k: int, use: str = "") -> Call:
    """The router of DeepSeek-V3 and the like (its shared experts run as their own MLP)."""
    return _from_schema("top2_sum_gate", "fp32,sigmoid", use, M=m, E=e, P=k)


def moe_expand(key: str, t: int, h: int, k: int, e: int, use: str = "") -> Call:
    return _from_schema("moe_expand", key, use, T=t, H=h, K=k, E=e, A=MOE_ALIGNMENT)


def moe_reduce(dt: str, t: int, h: int, k: int, e: int, use: str = "") -> Call:
    rows = _expanded_rows(t, k, e)
    return _from_schema("moe_reduce", f"{dt},{dt},weighted", use, P=rows, H=h, T=t, K=k)


def _expanded_rows(t: int, k: int, e: int) -> int:
    """moe_expand's x_sorted rows (its schema's size rule for P) at the default alignment."""
    schema = importlib.import_module(f"{__package__}.moe_expand").SCHEMA
    return schema.complete({"T": t, "K": k, "E": e, "A": MOE_ALIGNMENT})["P"]
