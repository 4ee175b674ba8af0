"""DeepSeek TileKernels' API (``tile-kernels`` 1.0.0) on tileaot's ahead-of-time kernels.

Switching is one import line: ``import tileaot.tile_kernels as tile_kernels`` (or
``from tileaot.tile_kernels.quant import per_token_cast`` for ``from tile_kernels.quant
import ...``). Every function here has TileKernels' name, module, parameter names, order and
defaults, and returns what TileKernels returns, computed by tileaot's ops (bit-exact where
TileKernels' tests compare exactly, see README "TileKernels counterparts"). No JIT: the
kernels are the wheel's cubins. Needs torch (TileKernels does too); ``import tileaot``
alone does not load this module.

Served (module: functions -> tileaot op):

* ``quant``: ``per_token_cast`` (e4m3 with 32, 64, 128 or hidden channels per scale ->
  `per_token_cast_fp8`; e2m1 with ``round_sf=True``, 16 or 32 -> `per_token_cast_fp4`; e5m6 ->
  `per_token_cast_e5m6`), ``per_block_cast`` (e4m3, (128, 128) -> `per_block_cast_fp8`); these
  two and ``swiglu_forward_and_per_token_cast`` in every scale layout (float32 row-major, TMA
  column-major, packed UE8M0: our scales relaid by torch after the op), ``per_channel_cast``
  (e4m3, 128 tokens a scale -> `per_channel_cast_fp8`), ``per_block_cast_lossless`` (e2m1 -> e4m3,
  every scale layout of input and output -> `per_block_cast_lossless`), ``per_channel_cast_fused``
  (e4m3, 128 tokens a scale, bf16/fp32 or (e4m3, fp32 (1, 128) scales) rows, optional
  ``pos_to_token`` -> `per_channel_cast_fused`), ``per_channel_cast_and_transpose``
  (e4m3, 32 or 128 tokens a scale -> `per_channel_cast_and_transpose`), ``cast_back`` /
  ``per_token_cast_back`` (-> `cast_back`; ``x_special_fmt="e5m6"`` -> `cast_back_e5m6`),
  ``swiglu_forward_and_per_token_cast`` (e4m3, 128 -> `swiglu_per_token_cast_fp8`),
  ``swiglu_forward_and_per_channel_cast_and_transpose`` (e4m3, 32 or 128 ->
  `swiglu_per_channel_cast_and_transpose`; ``without_transpose`` by a torch copy after it),
  ``swiglu_backward_and_per_token_cast`` (32 or 128 -> `swiglu_backward`, then
  `per_token_cast_fp8` of its float32 x_grad).
* ``torch`` (TileKernels' pure-torch references, served by kernels): ``swiglu_forward`` (->
  `swiglu` on a float32 copy; the clamp, its counts and the row weights by torch),
  ``swiglu_backward`` (-> `swiglu_backward`).
* ``moe``: ``top2_sum_gate`` (sigmoid -> `top2_sum_gate`), ``topk_gate`` (-> `topk_gate`),
  ``reduce_fused`` (-> `moe_reduce`), ``topk_sum_and_topk_group_idx``, ``normalize_weight``,
  ``mask_indices_by_tp``, ``group_count``, ``aux_fi``, ``inplace_unique_group_indices``,
  ``expand_to_fused``, ``expand_to_fused_with_sf`` (-> the ops of the same names;
  ``inplace_unique_group_indices`` writes its result back into the indices, as TileKernels).
* ``transpose``: ``transpose``, ``batched_transpose`` (-> `transpose`).
* ``modeling.mhc.ops``: ``sinkhorn_normalize``, ``expand_to_mhc``, ``mhc_pre_apply_mix``,
  ``mhc_post`` (-> the ops of the same names, differentiable).
* ``modeling.mhc.ops``: ``mhc_pre_norm_fn`` (-> `mhc_pre_norm_fn`, differentiable through
  `mhc_pre_norm_fn_backward`).
* ``modeling.mhc.ops``: ``mhc_pre_split_mixes``, ``mhc_head_compute_mix`` (-> the ops of the
  same names, differentiable).
* ``engram``: ``engram_hash``, ``fused_weight``, ``grad_w_reduce`` (-> `engram_hash`,
  `engram_fused_weight`, `engram_grad_w_reduce`; ``grad_w_reduce`` copies the sums back into
  its gradients, which TileKernels updates in place).
* ``modeling.engram``: ``engram_gate`` (-> `engram_gate` with a shared value row,
  differentiable).

An option TileKernels has and tileaot does not serve raises one line, e.g.
``NotImplementedError: tileaot.tile_kernels.per_token_cast: fmt='e3m2' is not served yet
(served: 'e4m3', 'e2m1', 'e5m6')``; never a different result. Not served at all yet: packed UE8M0
scale inputs (``cast_back`` of e4m3/e2m1 data, ``per_channel_cast_fused``), ``x_block_size``
re-casts, FP8 group 16, per-block sizes other than 128x128. ``use_packed_ue8m0`` without
``use_tma_aligned_col_major_sf`` (a layout TileKernels' kernels do not have) raises a
ValueError line, but for E5M6, whose reference packs row-major scales too.

Differences that remain (the results are TileKernels' where a call is served):

* Indices: tileaot's kernels write int32; ``top2_sum_gate``, ``topk_gate`` and
  ``topk_sum_and_topk_group_idx`` return them converted to int64, as TileKernels (one extra
  small copy); ``mask_indices_by_tp`` returns the dtype it was given (int32 or int64).
  int64 index inputs (``mask_indices_by_tp``, ``group_count``, ``aux_fi``) run as int32,
  clamped to ``[-1, 2**31 - 1]`` (a copy); ``inplace_unique_group_indices`` runs int64 indices
  as int32 clamped to the int32 range and writes back only the entries that became -1.
* FP4 scales: tileaot writes UE8M0 exponent bytes; ``per_token_cast(..., "e2m1", ...)``
  returns them decoded to TileKernels' float32 (exact), and ``cast_back`` of e2m1 data
  encodes float32 scales back, refusing (ValueError) scales that are no power of two: that
  check reads one flag from the GPU (a sync).
* ``swiglu_forward_and_per_channel_cast_and_transpose(..., without_transpose=True)`` runs
  the transposing kernel and copies its codes back with torch (TileKernels has a kernel
  path without the transpose); the bytes are the same. Its silu uses the accurate ``expf``
  of TileKernels' torch reference.
* ``swiglu_forward_and_per_token_cast`` gathers each row's weight from
  ``topk_weights`` with a torch indexing op before the fused kernel (TileKernels gathers
  inside it); a row with ``pos_to_token_topk == -1`` gets weight 0, as its reference.
* Inputs must be contiguous where tileaot's op says so (TileKernels also takes strided token
  rows in its casts); scales given to ``cast_back`` may be column-major (copied).
* tileaot's validation raises TypeError/ValueError with one line where TileKernels asserts;
  some inputs TileKernels refuses work here (any transpose shape, fp16 cast input).
* ``topk_gate``: ``num_topk <= 32`` (TileKernels: up to E). ``mask_indices_by_tp``:
  ``0 <= tp_rank < num_tp_ranks``. ``group_count``, ``aux_fi``: an entry ``>= num_groups`` /
  ``>= num_experts`` is not counted (TileKernels stops with a device assert); ``aux_fi`` needs
  ``num_aux_topk >= 1``. ``inplace_unique_group_indices`` takes any group value (TileKernels'
  kernel: below 128) and dedupes negative values too, as TileKernels' reference.
* ``engram_gate`` is a function (TileKernels': ``EngramGateFn.apply``), with its forward's
  parameters; it returns weight gradients and refuses weights with a ``main_grad``
  attribute (TileKernels accumulates into it). The mHC functions' ``out=`` works only outside
  autograd (tileaot's ops say why).
* Kernels run on torch's current stream; none of these functions synchronises except the
  e2m1 ``cast_back`` scale check.

Adding a function: write it in the module of TileKernels' name (one small function mapping
the arguments onto a tileaot op, options through `_served.require` / `require_none`) and
add it to that module's ``__all__``; tests/test_tile_kernels_compat.py checks its signature
against TileKernels' automatically (a new module, e.g. ``engram``, also goes into that
test's ``MODULES``; the test fails until it does). Give it a case in the test's CASES (the
launch) and NOT_SERVED (each refused option).
"""

from . import engram, modeling, moe, quant, torch, transpose

__all__ = ["engram", "modeling", "moe", "quant", "torch", "transpose"]
