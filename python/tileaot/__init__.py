"""tileaot: TileLang GPU kernels compiled ahead of time and shipped as cubins in this wheel.

Calling an op needs only the NVIDIA driver: no JIT, no nvcc, no tilelang at run time.

    >>> import torch, tileaot
    >>> x = torch.randn(8, 4096, dtype=torch.bfloat16, device="cuda")
    >>> y = tileaot.rms_norm(x, torch.ones(4096, dtype=torch.bfloat16, device="cuda"))

Torch is optional: the ops also take other frameworks' CUDA arrays through DLPack (CuPy, ...)
and return that framework's arrays (see `use_stream` for their stream).

Importing tileaot loads neither torch nor the native module `tileaot._C` nor the driver: torch
is used only when the arguments are torch tensors (so it is loaded already), `_C` is loaded by
the first call that needs it (or by accessing `VariantMissError` / `DriverError`), so
`import tileaot` works on a machine without a GPU and in a source checkout.
`python -m tileaot info` shows what this build contains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._arrays import use_stream
from ._info import info
from .aux_fi import aux_fi
from .cast_back import cast_back
from .cast_back_e5m6 import cast_back_e5m6
from .engram_fused_weight import engram_fused_weight
from .engram_gate import engram_gate
from .engram_gate_backward import engram_gate_backward
from .engram_grad_w_reduce import engram_grad_w_reduce
from .engram_hash import engram_hash
from .expand_to_fused import expand_to_fused
from .expand_to_fused_with_sf import expand_to_fused_with_sf
from .expand_to_mhc import expand_to_mhc
from .expand_to_mhc_backward import expand_to_mhc_backward
from .gemm import gemm
from .group_count import group_count
from .inplace_unique_group_indices import inplace_unique_group_indices
from .mask_indices_by_tp import mask_indices_by_tp
from .mhc_head_compute_mix import mhc_head_compute_mix
from .mhc_head_compute_mix_backward import mhc_head_compute_mix_backward
from .mhc_post import mhc_post
from .mhc_post_backward import mhc_post_backward
from .mhc_pre_apply_mix import mhc_pre_apply_mix
from .mhc_pre_apply_mix_backward import mhc_pre_apply_mix_backward
from .mhc_pre_norm_fn import mhc_pre_norm_fn
from .mhc_pre_norm_fn_backward import mhc_pre_norm_fn_backward
from .mhc_pre_split_mixes import mhc_pre_split_mixes
from .mhc_pre_split_mixes_backward import mhc_pre_split_mixes_backward
from .moe_expand import MoeExpandResult, moe_expand
from .moe_reduce import moe_reduce
from .normalize_weight import normalize_weight
from .per_block_cast_fp8 import per_block_cast_fp8
from .per_block_cast_lossless import per_block_cast_lossless
from .per_channel_cast_and_transpose import per_channel_cast_and_transpose
from .per_channel_cast_fp8 import per_channel_cast_fp8
from .per_channel_cast_fused import per_channel_cast_fused
from .per_token_cast_e5m6 import per_token_cast_e5m6
from .per_token_cast_fp4 import per_token_cast_fp4
from .per_token_cast_fp8 import per_token_cast_fp8
from .rms_norm import rms_norm
from .sinkhorn_normalize import sinkhorn_normalize
from .sinkhorn_normalize_backward import sinkhorn_normalize_backward
from .swiglu import swiglu
from .swiglu_backward import swiglu_backward
from .swiglu_per_channel_cast_and_transpose import swiglu_per_channel_cast_and_transpose
from .swiglu_per_token_cast_fp8 import swiglu_per_token_cast_fp8
from .top2_sum_gate import top2_sum_gate
from .topk_gate import topk_gate
from .topk_sum_and_topk_group_idx import topk_sum_and_topk_group_idx
from .transpose import transpose

if TYPE_CHECKING:
    from ._C import DriverError as DriverError
    from ._C import VariantMissError as VariantMissError

# The exceptions (and __version__) are left out on purpose: `from tileaot import *` must work
# without `_C` and stay fast.
__all__ = [
    "MoeExpandResult",
    "aux_fi",
    "cast_back",
    "cast_back_e5m6",
    "engram_fused_weight",
    "engram_gate",
    "engram_gate_backward",
    "engram_grad_w_reduce",
    "engram_hash",
    "expand_to_fused",
    "expand_to_fused_with_sf",
    "expand_to_mhc",
    "expand_to_mhc_backward",
    "gemm",
    "group_count",
    "info",
    "inplace_unique_group_indices",
    "mask_indices_by_tp",
    "mhc_head_compute_mix",
    "mhc_head_compute_mix_backward",
    "mhc_post",
    "mhc_post_backward",
    "mhc_pre_apply_mix",
    "mhc_pre_apply_mix_backward",
    "mhc_pre_norm_fn",
    "mhc_pre_norm_fn_backward",
    "mhc_pre_split_mixes",
    "mhc_pre_split_mixes_backward",
    "moe_expand",
    "moe_reduce",
    "normalize_weight",
    "per_block_cast_fp8",
    "per_block_cast_lossless",
    "per_channel_cast_and_transpose",
    "per_channel_cast_fp8",
    "per_channel_cast_fused",
    "per_token_cast_e5m6",
    "per_token_cast_fp4",
    "per_token_cast_fp8",
    "register_torch_ops",
    "rms_norm",
    "sinkhorn_normalize",
    "sinkhorn_normalize_backward",
    "swiglu",
    "swiglu_backward",
    "swiglu_per_channel_cast_and_transpose",
    "swiglu_per_token_cast_fp8",
    "top2_sum_gate",
    "topk_gate",
    "topk_sum_and_topk_group_idx",
    "transpose",
    "use_stream",
]


def register_torch_ops() -> None:
    """Register every op as a torch custom op, ``torch.ops.tileaot.<op>`` (this imports torch).

    For ``torch.compile(fullgraph=True)`` (which then also traces ``tileaot.<op>`` calls as the
    ops), ``torch.export`` and CUDA graphs. The same as ``import tileaot.torch_ops`` (see its
    docstring); calling it again does nothing.
    """
    from . import torch_ops  # noqa: F401  (importing it registers)


# Names served by __getattr__: the native module's exceptions, and the version (importlib's
# metadata reader costs ~18 ms, so it is read on first access, not at import).
_NATIVE_NAMES = ("VariantMissError", "DriverError")


def __getattr__(name: str) -> Any:
    from . import _lib

    if name in _NATIVE_NAMES:
        return getattr(_lib.native(), name)  # ImportError, with what to do, if not built
    if name == "__version__":
        return _lib.version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
