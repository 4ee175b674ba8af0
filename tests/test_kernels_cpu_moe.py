"""CPU tests of kernels_py.moe: the moe_expand / moe_reduce torch references against
independent computations (plain Python loops, float64), their KernelSpecs, and lowering smoke
tests (tilelang, no GPU)."""

import inspect
import struct

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.moe import moe_expand as mx  # noqa: E402
from kernels_py.moe import moe_reduce as mr  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def routing(tokens: int, slots: int, experts: int, drop: float = 0.1) -> torch.Tensor:
    """Random idx with dropped (-1) and out-of-range (>= E, < -1) entries and repeats."""
    idx = torch.randint(0, experts, (tokens, slots), dtype=torch.int32)
    noise = torch.rand(tokens, slots)
    idx[noise < drop] = -1
    idx[(noise >= drop) & (noise < 1.3 * drop)] = experts + 3
    idx[(noise >= 1.3 * drop) & (noise < 1.4 * drop)] = -7
    return idx


def loop_expand(x, idx, experts, alignment, x_scale=None):
    """moe_expand spelled out with Python loops: groups in (token, slot) order."""
    tokens, slots = idx.shape
    groups = [[] for _ in range(experts)]
    for t in range(tokens):
        for j in range(slots):
            e = int(idx[t, j])
            if 0 <= e < experts:
                groups[e].append((t, j))
    rows = tokens * slots + experts * (alignment - 1)
    xs = torch.zeros(rows, x.shape[1], dtype=torch.uint8 if x.dtype.itemsize == 1 else x.dtype)
    xb = x.view(torch.uint8) if x.dtype.itemsize == 1 else x
    ss = None if x_scale is None else torch.zeros(rows, x_scale.shape[1])
    pos = torch.full((tokens, slots), -1, dtype=torch.int32)
    offsets = [0]
    for e in range(experts):
        for r, (t, j) in enumerate(groups[e]):
            pos[t, j] = offsets[e] + r
            xs[offsets[e] + r] = xb[t]
            if ss is not None:
                ss[offsets[e] + r] = x_scale[t]
        offsets.append(offsets[e] + -(-len(groups[e]) // alignment) * alignment)
    return xs, torch.tensor(offsets, dtype=torch.int32), pos, ss


# --- moe_expand -----------------------------------------------------------------------------


@pytest.mark.parametrize("alignment", [1, 16, 128, 3])
@pytest.mark.parametrize(("tokens", "slots", "experts"), [(37, 8, 16), (5, 2, 64), (1, 1, 1)])
def test_expand_reference_matches_loops_bf16(tokens, slots, experts, alignment):
    x = torch.randn(tokens, 24).to(torch.bfloat16)
    idx = routing(tokens, slots, experts)
    idx[0, 0] = 0  # never all dropped
    xs, offsets, pos, scale = mx.reference(x, idx, experts, alignment)
    want_xs, want_off, want_pos, _ = loop_expand(x, idx, experts, alignment)
    assert scale is None
    assert xs.shape == (mx.rows_needed(tokens, slots, experts, alignment), 24)
    assert torch.equal(offsets, want_off) and torch.equal(pos, want_pos)
    assert torch.equal(xs.view(torch.int16), want_xs.view(torch.int16))  # bit for bit
    assert offsets.dtype == pos.dtype == torch.int32
    assert (torch.diff(offsets) % alignment == 0).all()


def test_expand_reference_fp8_carries_scales_bit_exactly():
    tokens, slots, experts = 50, 4, 8
    x = (torch.randn(tokens, 256) * 100).to(torch.float8_e4m3fn)
    x_scale = torch.rand(tokens, 2)
    idx = routing(tokens, slots, experts)
    xs, offsets, pos, scale = mx.reference(x, idx, experts, 16, x_scale=x_scale)
    want_xs, want_off, want_pos, want_scale = loop_expand(x, idx, experts, 16, x_scale)
    assert xs.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32
    assert torch.equal(xs.view(torch.uint8), want_xs)
    assert torch.equal(scale, want_scale)
    assert torch.equal(offsets, want_off) and torch.equal(pos, want_pos)


def test_expand_reference_orders_by_token_then_slot_and_pads_with_zeros():
    x = torch.arange(1, 6, dtype=torch.float32)[:, None].expand(5, 4).bfloat16()
    idx = torch.tensor([[0, 2], [2, -1], [1, 0], [5, 2], [0, 0]], dtype=torch.int32)
    xs, offsets, pos, _ = mx.reference(x, idx, 3, 4)
    assert offsets.tolist() == [0, 4, 8, 12]
    assert pos.tolist() == [[0, 8], [9, -1], [4, 1], [-1, 10], [2, 3]]
    assert xs[:, 0].tolist() == [1, 3, 5, 5, 3, 0, 0, 0, 1, 2, 4, 0] + [0] * 7


def test_expand_reference_expert_with_no_tokens_has_an_empty_group():
    idx = torch.tensor([[2, 2], [0, 2]], dtype=torch.int32)
    _, offsets, pos, _ = mx.reference(torch.zeros(2, 8, dtype=torch.bfloat16), idx, 4, 16)
    assert offsets.tolist() == [0, 16, 16, 32, 32]
    assert pos.tolist() == [[16, 17], [0, 18]]


# --- moe_reduce -----------------------------------------------------------------------------


def loop_reduce64(y, pos, weights):
    """float64, straight from the definition."""
    out = torch.zeros(pos.shape[0], y.shape[1], dtype=torch.float64)
    for t in range(pos.shape[0]):
        for j in range(pos.shape[1]):
            p = int(pos[t, j])
            if 0 <= p < y.shape[0]:
                w = 1.0 if weights is None else float(weights[t, j])
                out[t] += w * y[p].double()
    return out


# Output dtype rounding (half an ulp: 2^-9 bf16, 2^-24 fp32) plus fp32 accumulation slack.
TOL = {torch.bfloat16: (8e-3, 1e-5), torch.float32: (2e-6, 1e-6)}


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("y_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("out_dtype", [None, torch.bfloat16, torch.float32])
def test_reduce_reference_matches_float64(weighted, y_dtype, out_dtype):
    tokens, slots, rows = 23, 6, 90
    y = torch.randn(rows, 40).to(y_dtype)
    pos = torch.randint(0, rows, (tokens, slots), dtype=torch.int32)
    pos[torch.rand(tokens, slots) < 0.2] = -1
    pos[1, 2], pos[2, 3] = rows, -5  # out of range: skipped
    pos[3] = -1  # no live slot: a zero row
    weights = torch.rand(tokens, slots) if weighted else None
    got = mr.reference(y, pos, weights, out_dtype)
    want = loop_reduce64(y, pos, weights)
    assert got.dtype == (out_dtype or y_dtype) and got.shape == (tokens, 40)
    rtol, atol = TOL[got.dtype]
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)
    assert torch.equal(got[3].double(), torch.zeros(40, dtype=torch.float64))


def _fma_exact(a: float, b: float, c: float) -> float:
    """float32 fma by exact rational arithmetic, rounded once (round half to even)."""
    from fractions import Fraction

    exact = Fraction(a) * Fraction(b) + Fraction(c)
    lo = struct.unpack("<f", struct.pack("<f", float(exact)))[0]  # a float32 neighbour
    cands = {lo, float(np.nextafter(np.float32(lo), np.float32(np.inf)))}
    cands |= {float(np.nextafter(np.float32(lo), np.float32(-np.inf)))}
    best = min(cands, key=lambda v: (abs(Fraction(v) - exact), _f32_bits(v) & 1))
    return best


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def test_fma_f32_rounds_once():
    torch.manual_seed(1)
    a = torch.randn(3000) * torch.logspace(-30, 30, 3000)
    b = torch.rand(3000)
    c = -a * b + torch.randn(3000) * 1e-3  # cancellation: where mul-then-add differs most
    got = mr.fma_f32(a, b, c)
    want = [_fma_exact(x, y, z) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist(), strict=True)]
    assert got.tolist() == want
    assert not torch.equal(got, a * b + c)  # the two roundings do differ here
    special = torch.tensor([float("inf"), float("nan"), 1.0, -0.0])
    out = mr.fma_f32(special, torch.tensor([2.0, 1.0, float("inf"), 1.0]), torch.zeros(4))
    assert out[0] == float("inf") and out[1].isnan() and out[2] == float("inf") and out[3] == 0


def test_reduce_reference_weighted_is_one_fma_per_slot():
    y = torch.randn(20, 64)
    pos = torch.randint(0, 20, (5, 4), dtype=torch.int32)
    w = torch.rand(5, 4)
    acc = torch.zeros(5, 64)
    for j in range(4):
        acc = mr.fma_f32(y[pos[:, j].long()], w[:, j, None].expand(5, 64), acc)
    assert torch.equal(mr.reference(y, pos, w, torch.float32), acc)


def test_expand_then_reduce_round_trips():
    tokens, slots, experts = 40, 4, 16
    x = torch.randint(-8, 8, (tokens, 32)).float()
    idx = routing(tokens, slots, experts)
    xs, _, pos, _ = mx.reference(x, idx, experts, 16)
    live = ((idx >= 0) & (idx < experts)).sum(1, keepdim=True).float()
    assert torch.equal(mr.reference(xs, pos), x * live)  # small integers: exact
    w = torch.rand(tokens, slots)
    w_live = torch.where((idx >= 0) & (idx < experts), w, 0).sum(1, keepdim=True)
    torch.testing.assert_close(mr.reference(xs, pos, w), x * w_live, rtol=1e-6, atol=1e-5)


# --- specs ----------------------------------------------------------------------------------


def _variants(spec):
    return [(key, sp) for key in spec.keys for sp in spec.specs]


def test_specs_names_keys_and_constraints():
    names = [s.variant_name(k, sp) for s in (mx.SPEC, mr.SPEC) for k, sp in _variants(s)]
    assert len(names) == len(set(names))
    assert "moe_expand_bf16_any" in names and "moe_expand_e4m3_e256" in names
    assert "moe_reduce_bf16_fp32_weighted_any" in names
    assert [mx.SPEC.key_string(k) for k in mx.SPEC.keys] == ["bf16", "e4m3"]
    assert {mr.SPEC.key_string(k) for k in mr.SPEC.keys} == {
        f"{a},{b},{m}" for a in ("bf16", "fp32") for b in ("bf16", "fp32") for m in mr.MODES
    }
    assert mx.SPEC.constraints({"dtype": "float8_e4m3fn"}, {}) == {"H": 128}
    assert mx.SPEC.constraints({"dtype": "bfloat16"}, {"E": 256}) == {}
    for spec in (mx.SPEC, mr.SPEC):
        assert {} in [dict(sp) for sp in spec.specs]
        params = inspect.signature(spec.factory).parameters
        for key, sp in _variants(spec):
            assert {"arch", *key, *sp} <= set(params), (spec.op, key, sp)


def test_factories_reject_unknown_keys():
    with pytest.raises(ValueError, match="unsupported dtype"):
        mx.factory(arch="sm_90a", dtype="float16")
    with pytest.raises(ValueError, match=r"E=2048 is outside \[1, 1024\]"):
        mx.factory(arch="sm_90a", dtype="bfloat16", E=2048)
    with pytest.raises(ValueError, match="unsupported key"):
        mr.factory(arch="sm_90a", dtype="bfloat16", out_dtype="float16", mode="weighted")


# --- lowering smoke tests (need tilelang, no GPU) -------------------------------------------


@needs_tilelang
def test_lower_expand_has_four_kernels_and_16_byte_copies():
    src = lower_source(mx.factory(arch="sm_90a", dtype="bfloat16", E=256), "sm_90a", "mx_test")
    kernels = [f"mx_test_kernel{s}(" for s in ("", "_1", "_2", "_3")]
    assert src.count("__global__ void __launch_bounds__") == 4
    assert all(k in src for k in kernels)
    assert "__match_any_sync" in src and "__popc" in src
    assert "if ((H % 8) == 0)" in src or "if (((H % 8) == 0))" in src  # and the scalar path


@needs_tilelang
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_lower_expand_chains_its_kernels_by_pdl(dtype):
    # Every kernel but the first is launched early (PDL) and waits before reading what the one
    # before it wrote; each waits before it lets its successor launch (a transitive chain).
    from build_tools.trace import kernels_of, lower, signature_of

    func = mx.factory(arch="sm_90a", dtype=dtype, E=256).with_attr("global_symbol", "mxc")
    artifact = lower(func, "sm_90a")
    kernels = kernels_of(artifact, signature_of(func))
    assert [k["pdl"] for k in kernels] == [False, True, True, True]
    count, scan, rank, copy = artifact.kernel_source.split("__global__ void __launch_bounds__")[1:]
    wait, release = "cudaGridDependencySynchronize();", "cudaTriggerProgrammaticLaunchCompletion"
    assert wait not in count and release in count
    assert scan.index(wait) < scan.index(release) < scan.index("chunk_counts[")
    # rank: the idx loads come first, then the wait, then the counts of the scan.
    assert rank.index("flat[") < rank.index(wait) < rank.index(release)
    assert rank.index(wait) < rank.index("expert_counts[")
    # rank writes the copy's work list after its wait.
    assert rank.index(wait) < rank.index("work[")
    # copy: everything it reads first comes from rank, so it waits first; never releases early.
    assert copy.index(wait) < copy.index("work[") < copy.index("flat_pos[")
    assert copy.index(wait) < copy.index("expert_offsets[")
    assert copy.index(wait) < copy.index("tileaot_load_keep(")
    assert release not in copy


@needs_tilelang
@pytest.mark.parametrize("arch", ["sm_80", "sm_100a"])
def test_lower_expand_without_pdl_below_sm_90_and_with_it_above(arch):
    src = lower_source(mx.factory(arch=arch, dtype="bfloat16", E=256), arch, "mxa")
    assert ("cudaGridDependencySynchronize" in src) == (arch == "sm_100a")


@needs_tilelang
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_lower_expand_copy_moves_16_byte_vectors_with_l2_hints(dtype):
    # The copy gathers x rows (loads evict-last: read again by the window's other experts) and
    # writes x_sorted (stores evict-first) through the two functions of mx.L2_HINTS, which
    # T.import_source puts into the kernel source; the unaligned bf16 path keeps plain scalar
    # accesses and the padding blocks their zero vectors.
    src = lower_source(mx.factory(arch="sm_90a", dtype=dtype, E=256), "sm_90a", "mxs")
    assert mx.L2_HINTS.strip() in src
    assert "L2::evict_last" in mx.L2_HINTS and "L2::evict_first" in mx.L2_HINTS
    kernels = src.split("__global__ void __launch_bounds__")[1:]
    assert len(kernels) == 4
    copy = kernels[3]
    assert "tileaot_" not in "".join(kernels[:3])
    pad = copy[copy.index("expert_offsets[") :]  # the padding blocks' branch
    assert "*(uint4*)(x_sorted" in pad or "*(fp8_e4_16_t*)(x_sorted" in pad
    # One call of each in the unrolled vector loops: rows of x in, rows of x_sorted out.
    assert copy.count("tileaot_load_keep(") == 1 and copy.count("tileaot_store_stream(") == 1
    load = copy[copy.index("tileaot_load_keep(") :].split(";")[0]
    store = copy[copy.index("tileaot_store_stream(") :].split(";")[0]
    assert "(&(frag[" in load and "(&(x[" in load
    assert "(&(x_sorted[" in store and "(&(frag[" in store
    slots = copy[: copy.index("expert_offsets[")]  # the work list's branch
    assert "*(uint4*)(x_sorted" not in slots and "*(fp8_e4_16_t*)(x_sorted" not in slots
    if dtype == "bfloat16":  # the scalar path for H % 8 != 0: x_sorted[...] = vals[u]
        assert "if ((H % 8) == 0)" in slots and "] = vals[" in slots


@needs_tilelang
def test_expand_for_hip_has_no_cuda_hints():
    # HIP gets plain vector copies (the hints are PTX); its lowering is tested in test_hip.py.
    assert "tileaot_" not in mx.factory(arch="gfx942", dtype="bfloat16", E=256).script()
    assert "tileaot_load_keep" in mx.factory(arch="sm_80", dtype="bfloat16", E=256).script()


@needs_tilelang
def test_lower_reduce_sm100a_uses_16_byte_accesses_only():
    func = mr.factory(arch="sm_100a", dtype="bfloat16", out_dtype="float32", mode="weighted")
    src = lower_source(func, "sm_100a", "mr_test")
    assert "*(uint4*)(y_sorted" in src  # 16-byte loads; stores: one st.global.v4 per vector
    assert src.count("tl::store_global_128(") == 1 and "*(float4*)(out" not in src
    assert "longlong4" not in src and "_256" not in src  # no 32-byte accesses


@needs_tilelang
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_lower_reduce_weighted_is_one_explicit_fma_per_slot(arch):
    func = mr.factory(arch=arch, dtype="bfloat16", out_dtype="bfloat16", mode="weighted")
    src = lower_source(func, arch, "mr_fma")
    assert src.count("__fmaf_rn(") == 4  # two slots of a pair x (vector, scalar kernel)
    assert "scale *" not in src
