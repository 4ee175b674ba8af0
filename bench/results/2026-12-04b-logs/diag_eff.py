"""Why test_with_tile_kernels_mapping_and_cast failed under racecheck: TK's mapping, our output."""

import os
import sys

import torch

sys.path.insert(0, "tests")
import tilelang  # noqa: E402

sys.modules.setdefault("tilelang.utils.target", tilelang.backend.target)
import tile_kernels.moe as tkm  # noqa: E402
import tileaot  # noqa: E402
from test_gpu_expand_to_fused import _routing  # noqa: E402

from kernels_py.moe.expand_to_fused_with_sf import reference  # noqa: E402

print("caching off:", os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"))
for trial in range(3):
    idx = _routing(2048, 8, 256)
    pte, _, _, pos, *_ = tkm.get_fused_mapping(idx, 256, 0, 128)
    q, sf = tileaot.per_token_cast_fp8(torch.randn(2048, 7168, device="cuda").bfloat16(), 128)
    flat = pos.reshape(-1)
    v = flat[flat >= 0]
    dup = v.numel() - torch.unique(v).numel()
    P = pte.shape[0]
    routed = torch.zeros(P, dtype=torch.bool, device="cuda")
    routed[v.long()] = True
    neither = (~routed & (pte >= 0)).sum().item()
    bad_range = ((v < 0) | (v >= P)).sum().item()
    dup_idx = sum(len(set(r.tolist())) != len(r) for r in idx.cpu())
    print(
        f"trial {trial}: P={P} routed={routed.sum().item()} padding={(pte < 0).sum().item()} "
        f"neither={neither} dup_pos={dup} out_of_range={bad_range} "
        f"tokens_with_dup_experts={dup_idx}"
    )
    for col in (False, True):
        out, out_sf = tileaot.expand_to_fused_with_sf(
            q, sf, pos, pte, use_tma_aligned_col_major_sf=col
        )
        torch.cuda.synchronize()
        want, want_sf = reference(q, sf, pos, pte, "col" if col else "row")
        rows = (out.view(torch.uint8) != want.view(torch.uint8)).any(1).nonzero().flatten()
        print(
            f"  col={col}: bad rows {rows.numel()} first {rows[:8].tolist()} "
            f"pte {pte[rows[:8]].tolist()} routed {routed[rows[:8]].tolist()} "
            f"sf equal {torch.equal(out_sf.view(torch.int32), want_sf.view(torch.int32))}"
        )
