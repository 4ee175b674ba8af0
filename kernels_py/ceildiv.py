"""``ceil(n / d)`` of a size, written in the form TileLang 0.1.15 lowers fast.

``T.ceildiv(n, d)`` is ``(n + d - 1) // d``, a floordiv. Before CUDA codegen, TileLang's
LowerIntrin turns a floordiv by a power of two into ``shift_right``, launch extents included,
and the Simplify right after it then spends seconds failing to relate a block index
bounded by ``shift_right(M + 3, 2)`` to M in every guard and address: 4.8 CPU s of
swiglu_bf16_any's ~6 at sm_80, 0.4 s on the same module with its extents left as divisions
(bench/results/build-2026-12-02-tracing.md). A truncating division has the same value for
``n >= 0`` and stays a division, which the analyser bounds at once.
"""


def ceildiv(T, n, d: int):
    """``ceil(n / d)`` for a size ``n >= 0`` (int or TIR expression) and a constant ``d > 0``.

    Use it for the launch extents of T.Kernel (the host computes the same grid: build_tools/
    cexpr.py prints it as C++ ``/`` on int64). Loop and index expressions keep T.ceildiv: in
    device code the division would be printed as a signed ``/``, where the shift is cheaper."""
    if isinstance(n, int):
        return -(-n // d)
    return T.truncdiv(n + (d - 1), d)
