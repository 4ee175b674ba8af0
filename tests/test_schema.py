"""The op schemas (python/tileaot/_schema.py) and what is derived from them.

Every op with a `SCHEMA` is checked here once, parametrized: the grammar reads back, the launch
is straight-line code in the kernel's order, the short path's output bits, the `info` example,
the torch custom-op arguments and fake, and (with tilelang) the traced kernel signature of every
variant against the schema — the check `build_tools generate` runs on every build.
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from _fakes import STREAM, cpu_as_cuda, fake, new_empty_calls, t, tileaot  # noqa: F401 - fixtures
from _lowering import needs_tilelang

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

torch = pytest.importorskip("torch")
_schema = importlib.import_module("tileaot._schema")
OpSchema = _schema.OpSchema


def _schema_modules() -> dict:
    """op -> the module holding its `SCHEMA`: tileaot.<op>, or a public op's helper module
    (tileaot._cast_back_fp4). Found, not listed: an op with a schema is checked here by having
    one (the ops still without are in docs/ADDING_AN_OP.md)."""
    import pkgutil

    found = {}
    for info in pkgutil.iter_modules(tileaot.__path__):
        if not info.ispkg and not info.name.startswith("__"):
            module = importlib.import_module(f"tileaot.{info.name}")
            if isinstance(getattr(module, "SCHEMA", None), OpSchema):
                found[module.SCHEMA.op] = module
    return found


_MODULES = _schema_modules()
SCHEMA_OPS = tuple(sorted(_MODULES))


def _module(op: str):
    return _MODULES[op]


def test_schemas_are_found_in_op_modules_and_helper_modules():
    assert _module("rms_norm").__name__ == "tileaot.rms_norm"
    assert _module("cast_back_fp4").__name__ == "tileaot._cast_back_fp4"


def test_the_grammar_reads_back():
    s = OpSchema(
        "demo",
        "x[*M, 2*H]: T, w?[H]: fp32 -> y[*M, H]: T as out, s[*M, H // 128]: fp32,"
        " scratch tmp[64]: i32; eps: float32, n: int32",
        dtypes={"T": ("bf16", "fp16")},
        example={"M": 2, "H": 256},
    )
    names = [(t.name, t.role, t.optional, t.api) for t in s.tensors]
    assert names == [
        ("x", "in", False, "x"),
        ("w", "in", True, "w"),
        ("y", "out", False, "out"),
        ("s", "out", False, "s"),
        ("tmp", "scratch", False, "tmp"),
    ]
    assert s.scalars == (("eps", "float32"), ("n", "int32"))
    assert s.writes == 0b11100
    assert s.flat({"M": 2, "H": 256}) == (2, 512, 256, 2, 256, 2, 2, 64)
    assert s.example_shapes("bf16") == ("x[2, 2 * 256]", (2, 512, 256, 2, 256, 2, 2, 64))
    with pytest.raises(ValueError, match="unknown dtype"):
        OpSchema("bad", "x[N]: Q -> y[N]: Q")


def test_an_outputs_own_leading_dims_are_those_of_its_input(cpu_as_cuda):  # noqa: F811
    """``gw[*G, N]`` is shaped as the input with ``*G`` (a weight (N,) or [B, N]), not as the
    first ``*`` input: in the compiled bind, the rule-by-rule one and the torch fake."""
    s = OpSchema(
        "demo",
        "x[*M, N]: T, w[*G, N]: T -> y[*M, N]: T, gw[*G, N]: fp32",
        dtypes={"T": ("bf16",)},
    )
    for x, w in [(t(2, 3, 8), t(8)), (t(2, 3, 8), t(3, 8)), (t(6, 8), t(2, 3, 8))]:
        args = {"x": x, "w": w}
        for bound in (s.bind(args), s.bind_checked(args)):
            y, gw = s.outputs(torch, x, bound, None, args)
            assert (y.shape, gw.shape, gw.dtype) == (x.shape, w.shape, torch.float32)
            assert bound.dims["G"] == w.numel() // 8
        assert [o.shape for o in s.fake(args, torch)] == [x.shape, w.shape]
    with pytest.raises(ValueError, match=r"out\[1\] \(gw\) has shape \(8,\); this call writes"):
        x, w = t(4, 8), t(4, 8)
        s.outputs(torch, x, s.bind({"x": x, "w": w}), (t(4, 8), t(8, dtype=torch.float32)), {})
    with pytest.raises(ValueError, match=r"no input has the leading dims \*G"):
        OpSchema("bad", "x[*M, N]: T -> gw[*G, N]: T", dtypes={"T": ("bf16",)})


def test_keyed_sizes_and_dtypes_follow_the_key(cpu_as_cuda):  # noqa: F811
    s = OpSchema(
        "demo",
        "x[M, N]: T -> q[M, N]: S, scale[M, G]: fp32",
        dtypes={"T": ("bf16",), "S": ("u8", "e4m3")},
        key="{T},{group}",
        keyed=lambda key: (
            {"G": "N // 8", "S": "u8"} if key.endswith("g8") else {"G": 1, "S": "e4m3"}
        ),
        example={"M": 2, "N": 64},
    )
    assert s.example_shapes("bf16,g8") == ("x[2, 64]", (2, 64, 2, 64, 2, 8))
    assert s.example_shapes("bf16,token") == ("x[2, 64]", (2, 64, 2, 64, 2, 1))
    bound = s.bind({"x": t(3, 64)})
    s.fix(bound, "bf16,g8")
    assert bound.dims == {"M": 3, "N": 64, "G": 8} and bound.picked == {"T": "bf16", "S": "u8"}
    q, scale = s.fake({"x": t(3, 64)}, torch, "bf16,token")
    assert (q.shape, q.dtype, scale.shape) == ((3, 64), torch.float8_e4m3fn, (3, 1))
    key = {"dtype": "bfloat16", "group": "g8"}
    params = _params(s)
    params[1]["dtype"], params[2]["dtype"] = "uint8", "float32"
    s.check_signature(params, key, {"N": 64})
    params[2]["shape"] = ["d_M", 4]  # the kernel's scale has 4 columns, the key says 64 // 8
    with pytest.raises(ValueError, match="dim G is 4 in the kernel, 8 here"):
        s.check_signature(params, key, {"N": 64})
    params[1]["dtype"] = "float8_e4m3fn"
    with pytest.raises(ValueError, match="tensor q has dtype float8_e4m3fn, the schema uint8"):
        s.check_signature(params, key, {})
    params = _params(s)
    params[1]["dtype"], params[2]["dtype"] = "uint8", "float32"
    s.key = "{T}"  # a key format that leaves the group out: the C++ header would miss
    with pytest.raises(ValueError, match="the schema's key '{T}' spells 'bf16' for the kernel's"):
        s.check_signature(params, key, {})


def test_optional_inputs_bind_where_given(cpu_as_cuda):  # noqa: F811
    s = OpSchema("demo", "x[M, N]: T, w?[M]: fp32 -> y[M, N]: T", dtypes={"T": ("bf16",)})
    for w in (None, t(3, dtype=torch.float32)):
        b = s.bind({"x": t(3, 8), "w": w})
        assert b == s.bind_checked({"x": t(3, 8), "w": w}) and b.dims == {"M": 3, "N": 8}
    with pytest.raises(ValueError, match=r"w must have shape \(3,\) to match x \(3, 8\); got"):
        s.bind({"x": t(3, 8), "w": t(4, dtype=torch.float32)})
    with pytest.raises(TypeError, match="w has dtype torch.bfloat16; it must be torch.float32"):
        s.bind({"x": t(3, 8), "w": t(3)})


def test_moved_dtypes_are_checked_by_name(cpu_as_cuda):  # noqa: F811
    s = OpSchema("demo", "x[N]: T -> y[N]: T", dtypes={"T": ("e5m2", "i16", "bool")})
    assert s.bind({"x": torch.zeros(4, dtype=torch.int16)}).picked == {"T": "i16"}
    with pytest.raises(
        TypeError, match="supported dtypes: torch.float8_e5m2, torch.int16, torch.bool"
    ):
        s.bind({"x": t(4)})


def test_the_launcher_is_straight_line_code_in_kernel_order():
    src = _module("rms_norm").SCHEMA.launcher().__source__
    assert "for " not in src and "if " not in src
    assert "(x.data_ptr(), weight.data_ptr(), y.data_ptr(),), (M, N, N, M, N,), (eps, )" in src


# What the hand-written wrappers passed before the schema (the golden record holds the rest):
# op -> (key, example text, example flat shapes).
EXAMPLES = {
    "rms_norm": ("bf16", "x[4096, 4096]", (4096,) * 5),
    "gemm": ("bf16", "a[4096, 4096] b[4096, 4096]", (4096,) * 6),
    "swiglu": ("bf16", "x[4096, 2 * 2048]", (4096, 4096, 4096, 2048)),
    "top2_sum_gate": ("fp32,sigmoid", "logits[4096, 256]", (4096, 256, 256, 4096, 8, 4096, 8)),
    "per_block_cast_fp8": ("bf16", "x[4096, 7168]", (4096, 7168, 4096, 7168, 32, 56)),
    "per_channel_cast_fp8": ("bf16", "x[4096, 7168]", (4096, 7168, 4096, 7168, 32, 7168)),
    "per_token_cast_fp8": ("bf16,g128", "x[4096, 7168]", (4096, 7168, 4096, 7168, 4096, 56)),
    "per_token_cast_fp8/token": ("fp32,token", "x[4096, 7168]", (4096, 7168) * 2 + (4096, 1)),
    "per_token_cast_fp8/g64": ("bf16,g64", "x[4096, 7168]", (4096, 7168) * 2 + (4096, 112)),
    "transpose": ("e4m3", "x[1, 4096, 7168]", (1, 4096, 7168, 1, 7168, 4096)),
    "swiglu_per_token_cast_fp8": (
        "bf16",
        "x[4096, 2 * 7168]",
        (4096, 14336, 4096, 4096, 7168, 4096, 7168 // 128),
    ),
    "per_token_cast_fp4": ("bf16,g32,ue8m0", "x[4096, 7168]", (4096, 7168, 4096, 3584, 4096, 224)),
    "cast_back_fp8": (
        "bf16,g128",
        "q[4096, 7168] scale[4096, 56]",
        (4096, 7168, 4096, 56, 4096, 7168),
    ),
    "cast_back_fp8/token": (
        "fp32,token",
        "q[4096, 7168] scale[4096, 1]",
        (4096, 7168, 4096, 1, 4096, 7168),
    ),
    "cast_back_fp8/g32": (
        "fp32,g32",
        "q[4096, 7168] scale[4096, 224]",
        (4096, 7168, 4096, 224, 4096, 7168),
    ),
    "cast_back_fp8/block": (
        "bf16,block128",
        "q[4096, 7168] scale[32, 56]",
        (4096, 7168, 32, 56, 4096, 7168),
    ),
    "cast_back_fp4": (
        "bf16,g32,ue8m0",
        "q[4096, 3584] scale[4096, 224]",
        (4096, 3584, 4096, 224, 4096, 7168),
    ),
    "cast_back_fp4/g16": (
        "fp32,g16,e4m3",
        "q[4096, 3584] scale[4096, 448]",
        (4096, 3584, 4096, 448, 4096, 7168),
    ),
    "per_token_cast_fp4/g16": (
        "fp32,g16,e4m3",
        "x[4096, 7168]",
        (4096, 7168, 4096, 3584, 4096, 448),
    ),
    "topk_gate": ("fp32,softmax", "scores[4096, 256], k=8", (4096, 256, 4096, 8, 4096, 8)),
    "sinkhorn_normalize": ("fp32", "logits[32768, 4, 4]", (32768, 4, 4) * 2),
    "sinkhorn_normalize_backward": (
        "fp32",
        "grad_out[32768, 4, 4] logits[32768, 4, 4]",
        (32768, 4, 4) * 3,
    ),
    "expand_to_mhc": ("bf16", "hidden[32768, 7168], mhc_mult=4", (32768, 7168, 32768, 4, 7168)),
    "expand_to_mhc_backward": ("bf16", "grad_out[32768, 4, 7168]", (32768, 4, 7168, 32768, 7168)),
    "mhc_pre_apply_mix": (
        "bf16",
        "x[32768, 4, 7168] mix[32768, 4, 1]",
        (32768, 4, 7168, 32768, 4, 1, 32768, 7168),
    ),
    "mhc_pre_apply_mix_backward": (
        "bf16",
        "grad_out[32768, 7168] x[32768, 4, 7168] mix[32768, 4, 1]",
        (32768, 7168, 32768, 4, 7168, 32768, 4, 1, 32768, 4, 7168, 32768, 4, 1),
    ),
    "mhc_post": (
        "bf16",
        "x[32768, 7168] residual[32768, 4, 7168] post_layer_mix[32768, 4, 1]"
        " comb_res_mix[32768, 4, 4]",
        (32768, 7168, 32768, 4, 7168, 32768, 4, 1, 32768, 4, 4, 32768, 4, 7168),
    ),
    "mhc_post_backward": (
        "bf16",
        "grad_out[32768, 4, 7168] x[32768, 7168] residual[32768, 4, 7168]"
        " post_layer_mix[32768, 4, 1] comb_res_mix[32768, 4, 4]",
        (32768, 4, 7168, 32768, 7168, 32768, 4, 7168, 32768, 4, 1, 32768, 4, 4)
        + (32768, 7168, 32768, 4, 7168, 32768, 4, 1, 32768, 4, 4),
    ),
    "moe_reduce": (
        "bf16,bf16,sum",
        "y_sorted[36608, 7168] token_pos[4096, 8]",
        (36608, 7168, 4096, 8, 4096, 7168),
    ),
    "swiglu_backward": (
        "fp32,g128",
        "x[32768, 2 * 2048] x_sf[32768, 32] grad_out[32768, 2048] weight[4096, 8]"
        " token_topk_to_pos[4096, 8]",
        (32768, 4096, 32768, 32, 32768, 2048, 4096, 8, 32768, 4096, 8, 32768, 2048, 32768, 4096)
        + (4096, 8),
    ),
    "expand_to_fused": (
        "e4m3",
        "x[4096, 7168] token_topk_to_pos[4096, 8]",
        (4096, 7168, 4096, 8, 34816, 34816, 7168),
    ),
    "moe_expand": (
        "bf16",
        "x[4096, 7168] idx[4096, 8], num_experts=256, alignment=16",
        (4096, 7168, 4096, 8, 36608, 7168, 257, 4096, 8, 32, 256, 256, 32768),
    ),
}
# The public op serving each kernel op (its torch custom op).
PUBLIC = {"cast_back_fp8": "cast_back", "cast_back_fp4": "cast_back"}


@pytest.mark.parametrize("case", sorted(EXAMPLES))
def test_info_examples(case):
    key, *example = EXAMPLES[case]
    assert _module(case.partition("/")[0]).SCHEMA.example_shapes(key) == tuple(example)


# Kernel ops with no torch op of their own: engram_gate_save serves engram_gate's
# save_for_backward=True, which the torch op engram_gate (always (out, g)) leaves out.
NO_TORCH_OP = {"engram_gate_save"}


@pytest.mark.parametrize("op", [op for op in SCHEMA_OPS if op not in NO_TORCH_OP])
def test_derived_facts(op):
    """The torch op's arguments are the public function's (names, order, defaults, which may
    be None), read back by torch's own schema parser; its outputs are the schema's."""
    schema = _module(op).SCHEMA
    specs = importlib.import_module("tileaot.torch_ops._specs")
    (spec,) = [s for s in specs.SPECS if s.name == PUBLIC.get(op, op)]
    args = torch._C.parse_schema(f"f({spec.args}) -> ()").arguments
    params = inspect.signature(spec.fn).parameters.values()
    params = [p for p in params if p.name != "out" and p.name not in spec.fixed]
    assert [a.name for a in args] == [p.name for p in params]
    for a, p in zip(args, params, strict=True):
        assert (a.default_value if a.has_default_value() else p.empty) == p.default, a.name
        assert isinstance(a.type, torch._C.OptionalType) == p.annotation.endswith("| None")
    assert spec.outs == schema.torch_outs()


F32, I32, BF16, E4M3 = torch.float32, torch.int32, torch.bfloat16, torch.float8_e4m3fn


@pytest.mark.parametrize(
    ("op", "args", "want"),
    [
        ("rms_norm", lambda: (t(3, 5, 64), t(64), 1e-6), [(3, 5, 64)]),
        ("gemm", lambda: (t(7, 32), t(16, 32)), [(7, 16)]),
        ("swiglu", lambda: (t(2, 3, 64),), [(2, 3, 32)]),
        ("per_block_cast_fp8", lambda: (t(130, 300),), [(130, 300, "e4m3"), (2, 3, "fp32")]),
        ("per_channel_cast_fp8", lambda: (t(130, 300),), [(130, 300, "e4m3"), (2, 300, "fp32")]),
        ("per_token_cast_fp8", lambda: (t(3, 256),), [(3, 256, "e4m3"), (3, 2, "fp32")]),
        ("per_token_cast_fp8", lambda: (t(3, 256), None), [(3, 256, "e4m3"), (3, 1, "fp32")]),
        ("per_token_cast_fp8", lambda: (t(3, 256), 256), [(3, 256, "e4m3"), (3, 1, "fp32")]),
        ("transpose", lambda: (t(2, 3, 5, dtype=torch.int16),), [(2, 5, 3, "i16")]),
        ("transpose", lambda: (t(3, 5),), [(5, 3)]),
        (
            "swiglu_per_token_cast_fp8",
            lambda: (t(3, 512), None),
            [(3, 256, "e4m3"), (3, 2, "fp32")],
        ),
        (
            "swiglu_per_token_cast_fp8",
            lambda: (t(3, 512), t(3, dtype=torch.float32), 7.0, True),
            [(3, 256, "e4m3"), (3, 2, "fp32")],
        ),
        ("per_token_cast_fp4", lambda: (t(2, 3, 64),), [(2, 3, 32, "u8"), (2, 3, 2, "u8")]),
        ("per_token_cast_fp4", lambda: (t(4, 64), 16, "e4m3"), [(4, 32, "u8"), (4, 4, "e4m3")]),
        ("cast_back", lambda: (_e4m3(4, 256), t(4, 2, dtype=torch.float32)), [(4, 256)]),
        (
            "cast_back",
            lambda: (
                _e4m3(130, 200),
                t(2, 2, dtype=torch.float32),
                "block128",
                None,
                torch.float32,
            ),
            [(130, 200, "fp32")],
        ),
        ("cast_back", lambda: (_u8(2, 3, 8), _u8(2, 3, 1), None, 16), [(2, 3, 16)]),
        (
            "cast_back",
            lambda: (_u8(4, 16), _e4m3(4, 2), None, 16, torch.float32),
            [(4, 32, "fp32")],
        ),
        (
            "topk_gate",
            lambda: (t(5, 64, dtype=F32), 3, "sigmoid", True),
            [(5, 3, "i32"), (5, 3, "fp32")],
        ),
        ("sinkhorn_normalize", lambda: (t(2, 3, 4, 4, dtype=F32), 3, 0.0), [(2, 3, 4, 4, "fp32")]),
        (
            "sinkhorn_normalize_backward",
            lambda: (t(5, 8, 8, dtype=F32), t(5, 8, 8, dtype=F32), 3, 0.0),
            [(5, 8, 8, "fp32")],
        ),
        ("expand_to_mhc", lambda: (t(2, 3, 40), 4), [(2, 3, 4, 40)]),
        ("expand_to_mhc_backward", lambda: (t(2, 3, 8, 40),), [(2, 3, 40)]),
        ("mhc_pre_apply_mix", lambda: (t(2, 3, 4, 40), t(2, 3, 4, 1, dtype=F32)), [(2, 3, 40)]),
        (
            "mhc_pre_apply_mix_backward",
            lambda: (t(5, 40), t(5, 4, 40), t(5, 4, 1, dtype=F32)),
            [(5, 4, 40), (5, 4, 1, "fp32")],
        ),
        (
            "mhc_post",
            lambda: (t(5, 40), t(5, 4, 40), t(5, 4, 1, dtype=F32), t(5, 4, 4, dtype=F32)),
            [(5, 4, 40)],
        ),
        (
            "mhc_post_backward",
            lambda: (
                t(5, 4, 40),
                t(5, 40),
                t(5, 4, 40),
                t(5, 4, 1, dtype=F32),
                t(5, 4, 4, dtype=F32),
            ),
            [(5, 40), (5, 4, 40), (5, 4, 1, "fp32"), (5, 4, 4, "fp32")],
        ),
        ("moe_reduce", lambda: (t(20, 64), t(6, 2, dtype=I32), None, None), [(6, 64)]),
        (
            "moe_reduce",
            lambda: (t(20, 64), t(6, 2, dtype=I32), t(6, 2, dtype=F32), F32),
            [(6, 64, "fp32")],
        ),
        (
            "moe_expand",
            lambda: (t(5, 64), t(5, 2, dtype=I32), 7, 16, None),
            [(115, 64), (8, "i32"), (5, 2, "i32"), None],
        ),
        (
            "moe_expand",
            lambda: (t(5, 256).to(E4M3), t(5, 2, dtype=I32), 7, 4, t(5, 2, dtype=F32)),
            [(31, 256, "e4m3"), (8, "i32"), (5, 2, "i32"), (31, 2, "fp32")],
        ),
    ],
)
def test_fakes_give_the_shapes_the_wrappers_allocate(op, args, want):
    """want: (shape, dtype) of each output, None where the output is absent."""
    specs = importlib.import_module("tileaot.torch_ops._specs")
    (spec,) = [s for s in specs.SPECS if s.name == op]
    got = spec.fake(*args())
    got = got if isinstance(got, tuple) else (got,)
    want = [w if w is None or isinstance(w[-1], str) else (*w, "bf16") for w in want]
    dtypes = {s: getattr(torch, a) for s, (a, _) in _schema.LITERALS.items()}
    assert [g if g is None else tuple(g.shape) for g in got] == [w and w[:-1] for w in want]
    assert [g if g is None else g.dtype for g in got] == [w and dtypes[w[-1]] for w in want]


def _e4m3(*shape):
    return torch.zeros(shape).to(torch.float8_e4m3fn)


def _u8(*shape):
    return torch.zeros(shape, dtype=torch.uint8)


def test_fakes_size_outputs_from_the_arguments():
    """top2_sum_gate's idx/weights are [T, k + num_shared_experts]: `sizes` P = K + S, K and S
    the arguments `public` names."""
    specs = importlib.import_module("tileaot.torch_ops._specs")
    (spec,) = [s for s in specs.SPECS if s.name == "top2_sum_gate"]
    logits, bias = t(5, 256, dtype=torch.float32), t(256, dtype=torch.float32)
    for args, width in (((8,), 8), ((8, 8, 4, 2.5, 2), 10)):
        idx, w = spec.fake(logits, bias, *args)
        assert idx.shape == w.shape == (5, width)
        assert (idx.dtype, w.dtype) == (torch.int32, torch.float32)


@pytest.mark.parametrize("op", [op for op in SCHEMA_OPS if _module(op).SCHEMA.backward])
def test_a_backward_pairing_names_an_op_taking_the_gradient_and_the_inputs(op):
    """The pairing both the eager autograd.Function and torch_ops/_autograd.py read (a linear
    op's gradient, expand_to_mhc's, needs no inputs: its backward takes the gradient alone).
    One gradient per public output comes first (``grad_out``, or TileKernels' ``*_grad``
    names); the backward takes the forward's scalars it needs, in the forward's order."""
    schema = _module(op).SCHEMA
    backward = _module(schema.backward).SCHEMA
    names = [t.api for t in backward.inputs]
    n_out = len(schema.public_outs())
    grads, rest = names[:n_out], names[n_out:]
    assert grads == ["grad_out"] or all(n.endswith("_grad") for n in grads)
    assert rest in ([t.api for t in schema.inputs], [])
    scalars = [n for n, _ in schema.scalars]
    taken = [n for n, _ in backward.scalars]
    assert taken == [n for n in scalars if n in taken]


def test_an_optional_input_a_key_selects():
    """moe_reduce's weights: the "weighted" kernels take them, the "sum" ones do not."""
    schema = _module("moe_reduce").SCHEMA
    assert schema.given_by_key("bf16,fp32,weighted") == {"weights"}
    assert schema.given_by_key("bf16,fp32,sum") == set()
    assert schema.flat({"P": 9, "H": 64, "T": 3, "K": 2}, "fp32,fp32,weighted") == (
        (9, 64, 3, 2, 3, 2, 3, 64)
    )
    assert schema.writes_of() == 0b100 and schema.writes_of(frozenset({"weights"})) == 0b1000
    params = _params(schema)
    key = {"dtype": "bfloat16", "out_dtype": "bfloat16", "mode": "sum"}
    with pytest.raises(ValueError, match="kernel parameters"):  # weights with the "sum" key
        schema.check_signature(params, key, {})
    schema.check_signature([p for p in params if p["name"] != "weights"], key, {})
    schema.check_signature(params, {**key, "mode": "weighted"}, {})


def test_size_rules_scratch_and_the_public_output_order():
    """moe_expand: P and NC from the rules, the scratch packed at 16-byte boundaries (as the
    hand-written wrapper packed it), outputs in the public order, x_scale with e4m3 only."""
    schema = _module("moe_expand").SCHEMA
    dims = schema.complete({"T": 5, "K": 3, "E": 7, "A": 16, "H": 256})
    assert (dims["P"], dims["NC"]) == (5 * 3 + 7 * 15, 1)
    offsets, _ = schema.workspace_layout()
    at = [_schema._lambda(o, "test")(dims) for o in offsets]
    assert at == [0, 32, 64] and schema.workspace_size(dims) == 64 + 15 * 4
    assert [t.api for t in schema.public_outs()] == [
        "x_sorted",
        "expert_offsets",
        "token_pos",
        "x_sorted_scale",
    ]
    assert schema.given_by_key("e4m3") == {"x_scale"} and schema.given_by_key("bf16") == set()
    with pytest.raises(ValueError, match=r"x has dtype torch\.float8_e4m3fn: pass x_scale"):
        schema.bind({"x": t(5, 256).to(E4M3), "x_scale": None, "idx": t(5, 3, dtype=I32)})
    with pytest.raises(ValueError, match=r"x_scale is only for x of dtype float8_e4m3fn"):
        schema.bind({"x": t(5, 256), "x_scale": t(5, 2, dtype=F32), "idx": t(5, 3, dtype=I32)})


def test_bind_names_the_argument_and_the_tied_size():
    schema = _module("rms_norm").SCHEMA
    with pytest.raises(ValueError, match=r"weight must have shape \(64,\) to match x \(3, 64\)"):
        schema.bind({"x": t(3, 64), "weight": t(32)})
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., N\); got a 0-d tensor"):
        schema.bind({"x": torch.tensor(1.0).bfloat16(), "weight": t(32)})
    with pytest.raises(TypeError, match="weight has dtype torch.float32; it must match x"):
        schema.bind({"x": t(3, 64), "weight": t(64, dtype=torch.float32)})
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 2\*H\): its dim -1 is 7"):
        _module("swiglu").SCHEMA.bind({"x": t(2, 7)})


def _params(schema, dtype="bfloat16", **fixed):
    """A traced-signature stand-in (build_tools.trace.Param as a dict) for `schema`."""
    out = []
    for ts in schema.tensors:
        shape = [fixed.get(d.name, f"d_{d.name}") if d.name else d.text for d in ts.dims]
        tvm = _schema.LITERALS[ts.dtype][1] if ts.dtype in _schema.LITERALS else dtype
        out.append({"name": ts.name, "kind": "tensor", "dtype": tvm, "shape": shape})
    return out + [{"name": n, "kind": "scalar", "dtype": c, "shape": []} for n, c in schema.scalars]


def test_check_signature_finds_each_kind_of_drift():
    schema = _module("rms_norm").SCHEMA
    key = {"dtype": "bfloat16"}
    schema.check_signature(_params(schema), key, {})
    schema.check_signature(_params(schema, N=4096), key, {"N": 4096})
    renamed = _params(schema)
    renamed[2]["name"] = "out"
    with pytest.raises(ValueError, match="kernel parameters"):
        schema.check_signature(renamed, key, {})
    with pytest.raises(ValueError, match="tensor x has dtype float16, the schema bfloat16"):
        schema.check_signature(_params(schema, dtype="float16"), key, {})
    with pytest.raises(ValueError, match="dim N is 2048 in the kernel, 4096 here"):
        schema.check_signature(_params(schema, N=2048), key, {"N": 4096})
    short = _params(schema)
    short[1]["shape"] = []
    with pytest.raises(ValueError, match="tensor weight has rank 0"):
        schema.check_signature(short, key, {})


@needs_tilelang
@pytest.mark.parametrize("op", SCHEMA_OPS)
def test_every_traced_variant_matches_its_schema(op):
    """The build-time check on the real kernels (sm_80 lowering; the signature is arch-free)."""
    from build_tools.matrix import enumerate_variants
    from build_tools.schema_check import schema_of
    from build_tools.trace import signature_of

    points = enumerate_variants(
        importlib.import_module("kernels_py").all_specs(), ("sm_80",), (f"{op}_*",)
    )
    points = [p for p in points if p.spec.op == op]  # "swiglu_*" also selects swiglu_per_token…
    assert points, op
    schema = schema_of(op)
    for p in points:
        func = p.spec.factory(arch="sm_80", **p.key, **p.specialisation)
        sig = signature_of(func)
        params = [vars(x) for x in sig.params]
        schema.check_signature(params, p.key, p.specialisation, p.spec.key_string(p.key))


def test_the_schema_module_stays_torch_free():
    code = "import sys, tileaot._schema, tileaot.rms_norm; assert 'torch' not in sys.modules"
    src = str(Path(inspect.getfile(_schema)).parents[1])
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": src})


_WORKSPACE_MAIN = r"""
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tileaot/ops.hpp"

// The C ABI functions workspace.cpp calls, stubbed: every (op, key) is built, with the
// tensor count of moe_expand's bf16 kernels.
namespace tileaot::detail {
int set_error(int status, std::string message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return status;
}
}  // namespace tileaot::detail
extern "C" {
int32_t tileaot_lookup(const char*, const char*) { return 0; }
int tileaot_last_status(void) { return 0; }
int32_t tileaot_tensor_param(int32_t, int32_t, const char**, uint32_t*) { return 8; }
int32_t tileaot_tensor_ndim(int32_t, int32_t) { return 2; }
}

// engram_gate_backward's scratch: B, the launch's block count, is a parameter of its own.
static int engram(int64_t m, int64_t h, int64_t b) {
  using tileaot::DType;
  using tileaot::TensorView;
  static char mem[16];
  const TensorView rows(mem, {m, h}, DType::kBFloat16), w(mem, {1, h}, DType::kBFloat16),
      stat(mem, {m}, DType::kFloat32), wg(mem, {1, h}, DType::kFloat32);
  // every tensor's dims in parameter order, the scratch partial[B, H] last
  const int64_t shapes[] = {m, h, m, h, m, h, m, h, 1, h, 1, h, m, m, m, m,
                            m, h, m, h, m, h, 1, h, 1, h, b, h};
  int64_t bytes = -1;
  if (tileaot_workspace_size("engram_gate_backward", "bf16", shapes, 28, &bytes) != 0) return 1;
  const size_t typed = tileaot::engram_gate_backward_workspace_size(
      rows, rows, rows, rows, w, w, stat, stat, stat, stat, rows, rows, rows, wg, wg, b);
  std::printf("%lld %zu\n", static_cast<long long>(bytes), typed);
  return 0;
}

// argv: T H K E fp8 (moe_expand) or engram_gate_backward M H B -> "<C ABI bytes> <ops.hpp bytes>"
int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "engram_gate_backward") {
    return engram(std::atoll(argv[2]), std::atoll(argv[3]), std::atoll(argv[4]));
  }
  if (argc != 6) return 2;
  const int64_t t = std::atoll(argv[1]), h = std::atoll(argv[2]), k = std::atoll(argv[3]),
                e = std::atoll(argv[4]), g = h / 128, p = 1;  // P does not enter the scratch
  const bool fp8 = std::atoi(argv[5]) != 0;
  using tileaot::DType;
  using tileaot::TensorView;
  static char mem[16];
  const TensorView x(mem, {t, h}, DType::kBFloat16), xs(mem, {t, g}, DType::kFloat32),
      idx(mem, {t, k}, DType::kInt32), xo(mem, {p, h}, DType::kBFloat16),
      xos(mem, {p, g}, DType::kFloat32), off(mem, {e + 1}, DType::kInt32),
      pos(mem, {t, k}, DType::kInt32);
  int64_t bytes = -1;
  size_t typed;
  if (fp8) {
    const int64_t shapes[] = {t, h, t, g, t, k, p, h, p, g, e + 1, t, k};
    if (tileaot_workspace_size("moe_expand", "e4m3", shapes, 13, &bytes) != 0) return 1;
    typed = tileaot::moe_expand_workspace_size(x, xs, idx, xo, xos, off, pos);
  } else {
    const int64_t shapes[] = {t, h, t, k, p, h, e + 1, t, k};
    if (tileaot_workspace_size("moe_expand", "bf16", shapes, 9, &bytes) != 0) return 1;
    typed = tileaot::moe_expand_workspace_size(x, idx, xo, off, pos);
  }
  std::printf("%lld %zu\n", static_cast<long long>(bytes), typed);
  return 0;
}
"""


@pytest.fixture(scope="module")
def workspace_program(tmp_path_factory):
    """The generated ops.hpp and workspace.cpp of these schemas, built with the host compiler
    (C ABI stubs beside them): the C++ side of the workspace sizes."""
    import shutil

    from build_tools.emit_ops_hpp import emit_ops_hpp, emit_workspace_cpp

    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    root = Path(__file__).resolve().parents[1]
    d = tmp_path_factory.mktemp("ops_hpp")
    (d / "tileaot").mkdir()
    schemas = [_module(op).SCHEMA for op in SCHEMA_OPS]
    (d / "tileaot" / "ops.hpp").write_text(emit_ops_hpp(schemas))
    (d / "workspace.cpp").write_text(emit_workspace_cpp(schemas))
    (d / "main.cpp").write_text(_WORKSPACE_MAIN)
    flags = ["-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{root}/cpp/include"]
    flags += [f"-I{d}", f"-I{root}/cpp/runtime"]
    exe = d / "workspace_sizes"
    cmd = [cxx, *flags, str(d / "main.cpp"), str(d / "workspace.cpp"), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True)
    return exe


@pytest.mark.parametrize(
    ("tokens", "h", "k", "e", "align", "fp8"),
    [(5, 64, 3, 7, 16, False), (2000, 256, 8, 256, 128, True), (1, 128, 1, 1, 1, True)]
    + [(1030, 0, 1, 3, 2, False)],
)
def test_workspace_sizes_in_cpp_match_the_wrappers_allocation(
    workspace_program,
    fake,
    cpu_as_cuda,
    monkeypatch,
    tokens,
    h,
    k,
    e,
    align,
    fp8,
):
    """tileaot_workspace_size (C ABI) and tileaot::moe_expand_workspace_size (ops.hpp), both
    generated, against the workspace moe_expand allocates and the scratch pointers it passes."""
    schema = _module("moe_expand").SCHEMA
    made = []
    real = schema.workspace
    monkeypatch.setattr(schema, "workspace", lambda *a: made.append(real(*a)) or made[-1])
    x = t(tokens, h).to(torch.float8_e4m3fn) if fp8 else t(tokens, h)
    scale = t(tokens, h // 128, dtype=torch.float32) if fp8 else None
    idx = torch.randint(-1, e, (tokens, k), dtype=torch.int32)
    tileaot.moe_expand(x, idx, e, align, scale)
    (ws,) = made
    run = subprocess.run(
        [str(workspace_program), str(tokens), str(h), str(k), str(e), str(int(fp8))],
        check=True,
        capture_output=True,
        text=True,
    )
    c_abi, typed = map(int, run.stdout.split())
    assert c_abi == typed == ws.numel() == ws.nbytes
    # The scratch pointers: 16-byte aligned offsets into the workspace, ending inside it.
    ptrs = fake.launches[0].ptrs[-3:]
    base = ws.data_ptr()
    dims = schema.complete({"T": tokens, "K": k, "E": e, "A": align, "H": h})
    want = [_schema._lambda(o, "test")(dims) for o in schema.workspace_layout()[0]]
    assert [p - base for p in ptrs] == want and all(w % 16 == 0 for w in want)
    assert want[-1] + tokens * k * 4 == ws.nbytes


@pytest.mark.parametrize("shape", [(4096, 7168), (8, 4, 2048), (600, 1000), (3, 64)])
def test_engram_gate_backward_workspace_in_cpp_matches_the_wrapper(
    workspace_program, fake, cpu_as_cuda, monkeypatch, shape
):
    """engram_gate_backward's scratch (fp32 partial[B, H], B the wrapper's block count):
    tileaot_workspace_size and tileaot::engram_gate_backward_workspace_size give the bytes the
    wrapper allocates, for the B it launches with; the scratch starts the workspace."""
    made = new_empty_calls(monkeypatch)
    monkeypatch.setattr(_module("engram_gate_backward"), "_sm_count", lambda device: 132)
    m, h = shape[0] * (shape[1] if len(shape) == 3 else 1), shape[-1]
    rows = [t(*shape) for _ in range(4)]
    weights = [t(h), t(h)]
    stats = [t(*shape[:-1], dtype=torch.float32) for _ in range(4)]
    tileaot.engram_gate_backward(rows[0], *rows[1:], *weights, saved=stats)
    ws = made[-1]  # the workspace, allocated after the gradients
    (launch,) = fake.launches
    blocks = launch.shapes[-2]  # partial[B, H], the last tensor
    assert launch.shapes[-1] == h and launch.ptrs[-1] == ws.data_ptr()
    argv = [str(workspace_program), "engram_gate_backward", str(m), str(h), str(blocks)]
    run = subprocess.run(argv, check=True, capture_output=True, text=True)
    c_abi, typed = map(int, run.stdout.split())
    assert c_abi == typed == ws.nbytes == blocks * h * 4


def test_the_cpp_header_spells_each_key_as_the_schema_does():
    from build_tools.emit_ops_hpp import emit_function

    cast = emit_function(_module("per_token_cast_fp8").SCHEMA)
    assert "const std::string& group" in cast
    assert 'key_dtype(x.dtype())) + std::string(",") + group' in cast
    back = emit_function(_module("cast_back_fp8").SCHEMA)  # the out dtype is the output's
    assert 'key_dtype(x.dtype())) + std::string(",") + layout' in back
    fp4 = emit_function(_module("per_token_cast_fp4").SCHEMA)  # "scale": a tensor and a field
    assert "const TensorView& scale, const std::string& group, const std::string& scale_key" in fp4


def test_info_finds_the_example_of_a_kernel_op_served_by_a_helper_module():
    class Native:  # lookup/select as `_C` answers them
        def lookup(self, op, key):
            return 1

        def select(self, handle, device, shapes):
            return f"variant for {shapes}"

    pick = importlib.import_module("tileaot._info")._pick(
        Native(), "cast_back_fp4", "bf16,g32,e4m3", 0
    )
    assert pick["call"] == "q[4096, 3584] scale[4096, 224]"
    assert pick["variant"] == "variant for (4096, 3584, 4096, 224, 4096, 7168)"
