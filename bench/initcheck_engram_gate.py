"""Does engram_gate (forward, saving forward, backward) read or leave unwritten any byte?

Run under compute-sanitizer's initcheck restricted to our kernels (GPU only), e.g.
`compute-sanitizer --tool initcheck --kernel-name 'regex=^engram_gate' python
bench/initcheck_engram_gate.py`.

Why not the pytest file: with ``--kernel-name``, initcheck does not track writes made by the
kernels it skips, so inputs that torch kernels wrote (``torch.randn`` on the GPU) and torch's
own reductions read back by ``.item()`` show as "uninitialized" (the 2026-12-03 runs reported
only such reads). Here every input is made on the host and copied over (a tracked write),
outputs are allocated without being written, and each output is copied back whole: a report
then means one of our kernels read a byte nobody wrote, or left an output byte unwritten.
"""

from __future__ import annotations

import math

import tileaot
import torch

EPS = 1e-6
CASES = [  # (input shape, dtype, shared value row)
    ((37, 2048), torch.bfloat16, False),
    ((1600, 2048), torch.bfloat16, False),  # the shape of the 2026-12-02 report
    ((37, 2048), torch.float32, False),
    ((3, 4, 4096), torch.bfloat16, False),
    ((129, 7168), torch.bfloat16, False),
    ((5, 1000), torch.bfloat16, False),
    ((2, 3, 129), torch.float32, False),
    ((7, 4, 7168), torch.bfloat16, True),
    ((33, 4, 1000), torch.float32, True),
]


def _host_inputs(shape, dtype, shared, seed):
    g = torch.Generator().manual_seed(seed)
    n = shape[-1]
    h, k, v = (torch.randn(shape, generator=g).to(dtype) for _ in range(3))
    if shared:
        v = v[:, :1].contiguous()
    w_h, w_k = ((1 + 0.3 * torch.randn(n, generator=g)).to(dtype) for _ in range(2))
    grad = torch.randn(shape, generator=g).to(dtype)
    return [t.cuda() for t in (grad, h, k, v, w_h, w_k)]


def _read_back(label, tensors):
    """Copy every output to the host (initcheck checks the copy's source bytes)."""
    for i, t in enumerate(tensors):
        host = t.cpu()
        if host.is_floating_point() and not torch.isfinite(host).all():
            raise SystemExit(f"{label}: output {i} is not finite")


def run_case(shape, dtype, shared, seed):
    grad, h, k, v, w_h, w_k = _host_inputs(shape, dtype, shared, seed)
    rows = math.prod(shape[:-1])
    label = f"{'x'.join(map(str, shape))} {str(dtype)[6:]}{' shared v' if shared else ''}"
    out, gate = tileaot.engram_gate(h, k, v, w_h, w_k, EPS, return_gate=True)
    _read_back(f"{label} forward", (out, gate))
    saved = tileaot.engram_gate(h, k, v, w_h, w_k, EPS, save_for_backward=True)
    _read_back(f"{label} saving forward", saved)
    grads = tileaot.engram_gate_backward(grad, h, k, v, w_h, w_k, EPS, saved=saved[1:])
    _read_back(f"{label} backward", grads)
    torch.cuda.synchronize()
    print(f"{label}: {rows} rows, forward/save/backward outputs read back")


def main():
    for i, (shape, dtype, shared) in enumerate(CASES):
        run_case(shape, dtype, shared, seed=i)
    print(f"{len(CASES)} cases done")


if __name__ == "__main__":
    main()
