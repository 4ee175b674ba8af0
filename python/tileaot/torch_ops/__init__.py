"""tileaot's ops as torch custom ops: ``torch.ops.tileaot.<op>`` and ``torch.ops.tileaot.<op>_out``.

Importing this module (or calling ``tileaot.register_torch_ops()``, the same thing) registers
every public op with ``torch.library.custom_op`` and lets ``torch.compile`` trace calls of the
public functions as those ops. Then ``torch.compile(fullgraph=True)``, ``torch.export`` and
CUDA-graph capture see one opaque node per call instead of the Python wrapper (whose
``data_ptr()`` reads and native launch would break the graph). Nothing registers by itself:
``import tileaot`` never imports torch, and a ``tileaot.<op>`` call does not register (it would
add ~40 ms to the first call, plus the import of ``torch._dynamo``, which registration needs and
``torch.compile`` imports anyway: 1-5 s once, depending on the machine).

For each op ``name`` (every function in ``tileaot.__all__``):

* ``tileaot.name(...)`` inside a compiled function becomes the op below (through
  ``torch.compiler.substitute_in_graph``, torch >= 2.5; eager calls are untouched and cost
  nothing more). Positional and keyword arguments, defaults and ``out=`` work as in eager code.
* ``torch.ops.tileaot.name(*args)`` returns new tensors, like ``tileaot.name(*args)``. Its
  arguments are the wrapper's, in the same order with the same names and defaults, all
  positional-or-keyword (no ``out``). Differences: ``engram_gate`` always returns
  ``(out, gate)``; ``moe_expand`` returns a plain tuple (``x_sorted_scale`` is None for bf16).
* ``torch.ops.tileaot.name_out(*outs, *args)`` writes into given tensors and returns nothing:
  the output tensors come first, as in ATen's C++ ``at::<op>_out(out, ...)`` (a custom op
  takes keyword-only tensors only with ``torch.Tag.out``, which older torch lacks), e.g.
  ``torch.ops.tileaot.per_token_cast_fp8_out(q, scale, x)``.
  They must be exactly what the functional op would return (shape, dtype, device, contiguous,
  16-byte aligned). ``moe_expand_out`` takes ``x_sorted_scale=None`` for bf16 input.

Each call runs the public wrapper, so validation, errors and launches are those of eager
tileaot calls (errors surface when the compiled code runs, not while it is traced). Under
``torch.compile`` a fake implementation gives output shapes and dtypes without touching the
GPU; sizes may be symbolic, since no op has a data-dependent output size (``moe_expand``
allocates its upper bound of rows, ``T*K + E*(alignment-1)``, and reports the rows used in
``expert_offsets[-1]`` on the GPU). ``sinkhorn_normalize``, ``expand_to_mhc``,
``mhc_pre_apply_mix``, ``mhc_post``, ``mhc_pre_norm_fn`` and ``engram_gate`` are
differentiable (their backward ops are custom ops too, so the backward compiles as well; the
gate of ``engram_gate`` gets no gradient); no other op has a backward.
The ``*_backward`` ops make ``grad_out`` (``out_grad``) contiguous and 16-byte aligned (copying
it only if it is not), since autograd hands over gradients in whatever layout it has.

Eager code should keep calling ``tileaot.<op>``: ``torch.ops.tileaot.<op>`` adds torch's
dispatcher (~11 us of host time per call, measured on a CPU test machine) to the wrapper's
few microseconds.

Example:
    >>> import torch, tileaot
    >>> tileaot.register_torch_ops()
    >>> @torch.compile(fullgraph=True)
    ... def mlp(x, w, w_up, w_down):  # w_up [2I, H] (gate rows, then up rows), w_down [H, I]
    ...     h = tileaot.swiglu(tileaot.gemm(tileaot.rms_norm(x, w), w_up))
    ...     return x + tileaot.gemm(h, w_down)
    >>> x = torch.randn(64, 4096, dtype=torch.bfloat16, device="cuda")
    >>> w = torch.ones(4096, dtype=torch.bfloat16, device="cuda")
    >>> y = torch.ops.tileaot.rms_norm(x, w)  # the op itself: what torch.export records
"""

from __future__ import annotations

from ._register import op_names, register

__all__ = ["op_names", "register"]

register()
