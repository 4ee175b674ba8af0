"""A model's config -> the tileaot calls of its forward pass (for `python -m tileaot check`).

The config is a Hugging Face config.json (or the same keys in TOML): hidden_size,
intermediate_size, moe_intermediate_size, n_routed_experts / num_experts / num_local_experts,
num_experts_per_tok, n_shared_experts / shared_expert_intermediate_size, scoring_func,
num_attention_heads / num_key_value_heads / head_dim, the MLA ranks (q_lora_rank,
kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim), vocab_size, torch_dtype (or
dtype) and quantization_config (fp8 with weight_block_size -> fp8 activations in groups of
its column block). Two keys are tileaot's own: `arch` (the GPU: "sm_90a", "9.0", "H200") and
`tokens` (rows per call, default 4096).

A call's shapes are laid out as its Python wrapper passes them to the runtime (all tensor
dims, concatenated): tests/test_check.py holds each builder to its wrapper's example_shapes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FP8_GROUP = 128  # columns per scale of per-token/fused fp8 casts and of fp8 moe_expand
MOE_ALIGNMENT = 16  # moe_expand's default row alignment per expert
_CHUNK = 1024  # moe_expand's counting chunk (python/tileaot/moe_expand.py)
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


@dataclass(frozen=True)
class Moe:
    experts: int
    top_k: int
    intermediate: int  # each expert's SwiGLU width
    shared_intermediate: int | None  # shared experts, as one SwiGLU MLP of this width
    scoring: str  # "softmax" or "sigmoid"


def load_config(path: str | Path) -> ModelConfig:
    """Read a model config (.json, or .toml) and interpret it; ValueError names what is wrong."""
    path = Path(path)
    text = path.read_text()
    data = _loads_toml(text, path) if path.suffix == ".toml" else json.loads(text)
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
    return tomllib.loads(text)


def from_mapping(d: Mapping[str, Any], default_name: str = "model") -> ModelConfig:
    """Interpret config keys (Hugging Face names; see the module docstring)."""
    hidden = _int(d, "hidden_size")
    if not hidden:
        raise ValueError("the model config has no 'hidden_size' (a positive integer)")
    moe = _moe_config(d)
    # A MoE config's intermediate_size is the dense layers' width only where it has dense
    # layers (DeepSeek: first_k_dense_replace; Qwen-MoE: mlp_only_layers).
    has_dense = moe is None or (
        _int(d, "moe_intermediate_size") is not None
        and bool(_int(d, "first_k_dense_replace") or d.get("mlp_only_layers"))
    )
    dtype = str(d.get("dtype") or d.get("torch_dtype") or "bfloat16")
    return ModelConfig(
        name=str(d.get("name") or d.get("_name_or_path") or default_name),
        hidden=hidden,
        dtype=_DTYPES.get(dtype.removeprefix("torch."), dtype),
        arch=str(d["arch"]) if d.get("arch") else None,
        tokens=_int(d, "tokens") or 4096,
        projections=tuple(_projections(d, hidden)),
        norms=tuple(_norms(d, hidden)),
        dense_intermediate=_int(d, "intermediate_size") if has_dense else None,
        moe=moe,
        fp8_group=_fp8_group(d.get("quantization_config")),
    )


def _moe_config(d: Mapping[str, Any]) -> Moe | None:
    experts = _first_int(d, ("n_routed_experts", "num_experts", "num_local_experts"))
    if not experts:
        return None
    top_k = _first_int(d, ("num_experts_per_tok", "num_experts_per_token"))
    width = _first_int(d, ("moe_intermediate_size", "intermediate_size"))
    if not (top_k and width):
        raise ValueError(
            f"the model config has {experts} experts but no num_experts_per_tok or no "
            "moe_intermediate_size/intermediate_size: give both (positive integers)"
        )
    shared = _int(d, "shared_expert_intermediate_size")
    if shared is None:
        shared = (_int(d, "n_shared_experts") or 0) * width or None
    return Moe(experts, top_k, width, shared, str(d.get("scoring_func") or "softmax"))


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


def _norms(d: Mapping[str, Any], hidden: int) -> Iterator[tuple[str, int]]:
    yield "input_layernorm, post_attention_layernorm, norm", hidden
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
    merged: dict[tuple[str, str, tuple[int, ...]], Call] = {}
    for call in _all_calls(cfg):
        ident = (call.op, call.key, call.shapes)
        seen = merged.get(ident)
        merged[ident] = call if seen is None else _merge_uses(seen, call)
    return list(merged.values())


def _merge_uses(a: Call, b: Call) -> Call:
    uses = tuple(dict.fromkeys(a.uses + b.uses))
    return Call(a.op, a.key, a.shapes, a.text, uses)


def _all_calls(cfg: ModelConfig) -> Iterator[Call]:
    t, dt = cfg.tokens, cfg.dtype
    for use, n in cfg.norms:
        yield rms_norm(dt, t, n, use)
    for use, n, k in cfg.projections:
        if use == "lm_head":  # kept in the activation dtype by fp8 checkpoints
            yield gemm(dt, t, n, k, use)
        else:
            yield from _linear(cfg, t, n, k, use)
    if cfg.dense_intermediate:
        yield from _mlp(cfg, t, cfg.dense_intermediate, "mlp")
    if cfg.moe is not None:
        yield from _moe(cfg, cfg.moe)


def _linear(
    cfg: ModelConfig, m: int, n: int, k: int, use: str, quantised: bool = False
) -> Iterator[Call]:
    """A linear layer; with fp8 activations its input is cast first (unless it already is)."""
    if cfg.fp8_group is None:
        yield gemm(cfg.dtype, m, n, k, use)
        return
    if not quantised:
        yield per_token_cast_fp8(cfg.dtype, m, k, cfg.fp8_group, f"{use} input")
    yield gemm("e4m3", m, n, k, use)


def _mlp(cfg: ModelConfig, m: int, width: int, use: str, routed: bool = False) -> Iterator[Call]:
    """gate_up -> SwiGLU (fused with the fp8 cast if fp8) -> down."""
    yield from _linear(cfg, m, 2 * width, cfg.hidden, f"{use}.gate_up_proj", quantised=routed)
    if cfg.fp8_group is None:
        yield swiglu(cfg.dtype, m, width, f"{use} activation")
    else:
        yield swiglu_per_token_cast_fp8(cfg.dtype, m, width, f"{use} activation")
    yield from _linear(cfg, m, cfg.hidden, width, f"{use}.down_proj", quantised=True)


def _moe(cfg: ModelConfig, moe: Moe) -> Iterator[Call]:
    t, h, e, k = cfg.tokens, cfg.hidden, moe.experts, moe.top_k
    yield gemm(cfg.dtype, t, e, h, "router (gate)")
    yield topk_gate(moe.scoring, t, e, k, "router top-k")
    if cfg.fp8_group is not None:
        yield per_token_cast_fp8(cfg.dtype, t, h, FP8_GROUP, "expert input")
    yield moe_expand("e4m3" if cfg.fp8_group is not None else cfg.dtype, t, h, k, e, "dispatch")
    rows = max(1, math.ceil(t * k / e))  # an expert's average share of the routed rows
    yield from _mlp(cfg, rows, moe.intermediate, "experts", routed=True)
    if moe.shared_intermediate:
        yield from _mlp(cfg, t, moe.shared_intermediate, "shared_experts")
    yield moe_reduce(cfg.dtype, t, h, k, e, "combine")


# ---- one builder per op: the wrapper's flat shape layout --------------------------------------


def rms_norm(dt: str, m: int, n: int, use: str = "") -> Call:
    return Call("rms_norm", dt, (m, n, n, m, n), f"x[{m}, {n}]", (use,))


def gemm(dt: str, m: int, n: int, k: int, use: str = "") -> Call:
    return Call("gemm", dt, (m, k, n, k, m, n), f"a[{m}, {k}] b[{n}, {k}]", (use,))


def swiglu(dt: str, m: int, h: int, use: str = "") -> Call:
    return Call("swiglu", dt, (m, 2 * h, m, h), f"x[{m}, 2 * {h}]", (use,))


def swiglu_per_token_cast_fp8(dt: str, m: int, h: int, use: str = "") -> Call:
    shapes = (m, 2 * h, m, m, h, m, h // FP8_GROUP)
    return Call("swiglu_per_token_cast_fp8", dt, shapes, f"x[{m}, 2 * {h}]", (use,))


def per_token_cast_fp8(dt: str, m: int, n: int, group: int, use: str = "") -> Call:
    key = f"{dt},g{group}" if group else f"{dt},token"
    scales = n // group if group else 1
    return Call("per_token_cast_fp8", key, (m, n, m, n, m, scales), f"x[{m}, {n}]", (use,))


def topk_gate(scoring: str, m: int, e: int, k: int, use: str = "") -> Call:
    text = f"scores[{m}, {e}], k={k}"
    return Call("topk_gate", f"fp32,{scoring}", (m, e, m, k, m, k), text, (use,))


def moe_expand(key: str, t: int, h: int, k: int, e: int, use: str = "") -> Call:
    rows, chunks = _expanded_rows(t, k, e), -(-(t * k) // _CHUNK)
    tail: tuple[int, ...] = (e + 1, t, k, chunks, e, e, t * k)
    head: tuple[int, ...]
    if key == "e4m3":
        g = h // FP8_GROUP
        head = (t, h, t, g, t, k, rows, h, rows, g)
    else:
        head = (t, h, t, k, rows, h)
    return Call("moe_expand", key, head + tail, f"x[{t}, {h}] idx[{t}, {k}], E={e}", (use,))


def moe_reduce(dt: str, t: int, h: int, k: int, e: int, use: str = "") -> Call:
    rows = _expanded_rows(t, k, e)
    shapes = (rows, h, t, k, t, k, t, h)
    text = f"y_sorted[{rows}, {h}] weights[{t}, {k}]"
    return Call("moe_reduce", f"{dt},{dt},weighted", shapes, text, (use,))


def _expanded_rows(t: int, k: int, e: int) -> int:
    """moe_expand's x_sorted rows: T*K plus each expert's worst-case alignment padding."""
    return t * k + e * (MOE_ALIGNMENT - 1)
