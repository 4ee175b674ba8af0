"""engram_hash on the CPU: our reference against TileKernels 1.0.0's
(`tile_kernels.torch.engram.engram_hash_ref`) and against Python integers, bit for bit (the
hash is integer arithmetic: TileKernels' kernel must equal its reference exactly), the
wrapper's launches and checks, and lowering.

TileKernels has no test of its own for the hash; the sizes here are its kernel's defaults
(3-grams, 2 layers, 8 tables per order) and the neighbours a model would take: orders 2 to 5,
1 to 4 layers, 1 to 16 tables, table sizes from small primes to 2**31 - 1, multipliers of the
Engram model's kind (odd, below int64 max over the token vocabulary) and huge or negative ones
whose products wrap.
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, t  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402
from _lowering import lower_source, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.engram.engram_hash")
op = importlib.import_module("tileaot.engram_hash").engram_hash
I32, I64 = torch.int32, torch.int64
TOKENS = (0, 1, 7, 129, 4001)
VOCAB = 129280  # DeepSeek-V3's tokenizer
# (N, L, E): TileKernels' defaults first
SHAPES = ((3, 2, 8), (2, 1, 1), (2, 4, 16), (4, 2, 8), (5, 3, 4), (3, 1, 7))


def inputs(tokens: int, n: int, layers: int, e: int, kind: str, seed: int):
    """(ids, multipliers, vocab_sizes, offsets) of one call; `kind` picks the value ranges."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (tokens, n), generator=g, dtype=I32)
    if kind == "engram":  # the model's: odd multipliers whose products cannot overflow
        bound = (2**63 - 1) // VOCAB // 2
        mult = torch.randint(0, bound, (layers, n), generator=g) * 2 + 1
        sizes = torch.randint(100_000, 200_000, (layers, n - 1, e), generator=g, dtype=I32)
    elif kind == "wrap":  # full-range ids and multipliers: the int64 products wrap
        ids = torch.randint(-(2**31), 2**31 - 1, (tokens, n), generator=g, dtype=I32)
        mult = torch.randint(-(2**63), 2**63 - 1, (layers, n), generator=g)
        sizes = torch.randint(1, 2**31 - 1, (layers, n - 1, e), generator=g, dtype=I32)
    elif kind == "negative":  # negative hashes and table sizes: the floor remainder's sign
        mult = -torch.randint(1, 2**40, (layers, n), generator=g)
        sizes = torch.randint(-1000, 1000, (layers, n - 1, e), generator=g, dtype=I32)
        sizes[sizes == 0] = -1
    elif kind == "small":  # tiny tables: 1 (every index 0) and 2, 3
        mult = torch.randint(1, 2**20, (layers, n), generator=g)
        sizes = torch.randint(1, 4, (layers, n - 1, e), generator=g, dtype=I32)
    else:
        raise ValueError(kind)
    return ids, mult, sizes, tk("engram").make_offsets(sizes)


def python_hash(ids, mult, sizes, offsets) -> torch.Tensor:
    """The docstring's formula in Python integers, wrapping where int64 / int32 would."""

    def wrap(x: int, bits: int) -> int:
        return (x + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)

    tokens, n = ids.shape
    layers, _, e = sizes.shape
    out = torch.empty(layers, tokens, (n - 1) * e, dtype=I32)
    for layer in range(layers):
        for tok in range(tokens):
            h = 0
            for i in range(n):
                h ^= wrap(int(ids[tok, i]) * int(mult[layer, i]), 64)
                for j in range(e if i else 0):
                    c = (i - 1) * e + j
                    r = h % int(sizes[layer, i - 1, j])  # Python's %: the divisor's sign
                    out[layer, tok, c] = wrap(r + int(offsets[layer, c]), 32)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "n{}_l{}_e{}".format(*s))
@pytest.mark.parametrize("kind", ["engram", "wrap", "negative", "small"])
def test_reference_matches_tile_kernels_bit_for_bit(shape, kind):
    ref = tk("engram").engram_hash_ref
    for i, tokens in enumerate(TOKENS):
        args = inputs(tokens, *shape, kind, seed=i)
        ours, theirs = m.reference(*args), ref(*args)
        n, layers, e = shape
        assert ours.dtype == I32 and ours.shape == (layers, tokens, (n - 1) * e)
        assert torch.equal(ours, theirs), (shape, kind, tokens)


@pytest.mark.parametrize("kind", ["engram", "wrap", "negative", "small"])
def test_reference_is_the_documented_formula(kind):
    """An independent oracle (Python integers) on small inputs."""
    args = inputs(9, 4, 2, 3, kind, seed=5)
    assert torch.equal(m.reference(*args), python_hash(*args))


def test_offsets_wrap_in_int32():
    """Table sizes near 2**31: the offsets' prefix sums and the indices wrap (int32), in the
    reference as in TileKernels'."""
    sizes = torch.full((2, 2, 8), 2**31 - 1, dtype=I32)
    offsets = tk("engram").make_offsets(sizes)
    assert (offsets < 0).any()
    ids = torch.randint(0, VOCAB, (33, 3), dtype=I32)
    mult = torch.randint(1, 2**40, (2, 3))
    want = tk("engram").engram_hash_ref(ids, mult, sizes, offsets)
    assert torch.equal(m.reference(ids, mult, sizes, offsets), want)
    assert torch.equal(python_hash(ids, mult, sizes, offsets), want)


def test_hash_of_each_order_is_the_running_xor():
    """One token, one table: order 2 takes ids[0]*m0 ^ ids[1]*m1, order 3 XORs in ids[2]*m2."""
    ids = torch.tensor([[3, 5, 7]], dtype=I32)
    mult = torch.tensor([[11, 13, 17]])
    sizes = torch.tensor([[[1000], [1000]]], dtype=I32)
    offsets = torch.tensor([[0, 1000]], dtype=I32)
    h2 = (3 * 11) ^ (5 * 13)
    h3 = h2 ^ (7 * 17)
    assert m.reference(ids, mult, sizes, offsets).tolist() == [[[h2 % 1000, 1000 + h3 % 1000]]]


def ids_(tokens, n):
    return t(tokens, n, dtype=I32)


def call(tokens=5, n=3, layers=2, e=8):
    return (
        ids_(tokens, n),
        t(layers, n, dtype=I64),
        t(layers, n - 1, e, dtype=I32),
        t(layers, (n - 1) * e, dtype=I32),
    )


@pytest.mark.parametrize("shape", [(5, 3, 2, 8), (7, 4, 3, 5), (1, 2, 1, 1)])
def test_launch_arguments(fake, cpu_as_cuda, shape):
    tokens, n, layers, e = shape
    ids, mult, sizes, offsets = call(*shape)
    y = op(ids, mult, sizes, offsets)
    assert y.shape == (layers, tokens, (n - 1) * e) and y.dtype == I32
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("engram_hash", "i32")
    check_launch(
        launch,
        "engram_hash",
        ngram_token_ids=ids,
        multipliers=mult,
        vocab_sizes=sizes,
        offsets=offsets,
        output=y,
    )
    out = torch.empty_like(y)
    assert op(ids, mult, sizes, offsets, out=out) is out
    assert fake.launches[-1].ptrs[-1] == out.data_ptr()


@pytest.mark.parametrize("shape", [(0, 3, 2, 8), (5, 3, 0, 8), (5, 3, 2, 0)])
def test_empty_output_launches_nothing(fake, cpu_as_cuda, shape):
    """No tokens, no layers or no tables: the (empty) output is returned, as TileKernels
    (which skips its kernel with no tokens)."""
    tokens, n, layers, e = shape
    y = op(*call(*shape))
    assert y.shape == (layers, tokens, (n - 1) * e) and y.dtype == I32
    assert fake.launches == []


NAMES = ("ngram_token_ids", "multipliers", "vocab_sizes", "offsets")


def _args(**change):
    args = dict(zip(NAMES, call(), strict=True))
    args.update(change)
    return args


BAD = [
    (_args(ngram_token_ids=t(5, 3, dtype=I64)), TypeError, r"ngram_token_ids.*int32"),
    (_args(multipliers=t(2, 3, dtype=I32)), TypeError, r"multipliers.*int64"),
    (_args(vocab_sizes=t(2, 2, 8, dtype=I64)), TypeError, r"vocab_sizes.*int32"),
    (_args(offsets=t(2, 16, dtype=I64)), TypeError, r"offsets.*int32"),
    (_args(ngram_token_ids=t(5, 3)), TypeError, r"ngram_token_ids"),
    (_args(ngram_token_ids=ids_(5, 4)), ValueError, r"multipliers must have shape"),
    (_args(ngram_token_ids=t(15, dtype=I32)), ValueError, r"ngram_token_ids must have shape"),
    (_args(multipliers=t(3, 3, dtype=I64)), ValueError, r"vocab_sizes must have shape"),
    (_args(vocab_sizes=t(2, 3, 8, dtype=I32)), ValueError, r"vocab_sizes must have shape"),
    (_args(vocab_sizes=t(2, 2, 4, dtype=I32)), ValueError, r"offsets must have shape"),
    (_args(offsets=t(2, 8, dtype=I32)), ValueError, r"offsets must have shape"),
    (_args(offsets=t(2, 16, 1, dtype=I32)), ValueError, r"offsets must have shape"),
    (_args(out=t(2, 5, 15, dtype=I32)), ValueError, r"out"),
    (_args(out=t(2, 5, 16, dtype=I64)), TypeError, r"out"),
    (_args(vocab_sizes="sizes"), TypeError, r"vocab_sizes"),
]


@pytest.mark.parametrize("args, exc, message", BAD)
def test_bad_calls_raise_one_line_before_any_launch(args, exc, message, fake, cpu_as_cuda):
    with pytest.raises(exc, match=message) as info:
        op(**args)
    assert "\n" not in str(info.value)
    assert fake.launches == []


def test_unigrams_are_refused(fake, cpu_as_cuda):
    """N = 1 hashes nothing (TileKernels' reference fails on it): one line saying why."""
    args = (ids_(5, 1), t(2, 1, dtype=I64), t(2, 0, 8, dtype=I32), t(2, 0, dtype=I32))
    with pytest.raises(ValueError, match=r"max_ngram_size \(its last dim\) must be >= 2"):
        op(*args)
    assert fake.launches == []


@needs_tilelang
@pytest.mark.parametrize("spec", [{}, *m.STATIC], ids=lambda s: "generic" if not s else "n3e8")
def test_lowers_for_every_default_arch(spec):
    """Each variant on each default arch: the int64 floor remainder (a truncating `%` and a
    sign fix-up), the XOR in int64."""
    from kernels_py.spec import DEFAULT_ARCHS

    for arch in DEFAULT_ARCHS:
        src = lower_source(m.factory(arch=arch, dtype="int32", **spec), arch, "eh")
        assert "int64_t rmod = (h % ((int64_t)" in src, arch
        assert "(rmod + ((int64_t)" in src and "(h ^ " in src, arch
