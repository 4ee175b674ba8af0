"""A deliberate out-of-bounds launch: the negative control of scripts/sanitize.sh.

memcheck must report errors in tileaot's rms_norm kernel here, under the same kernel filter the
sanitized test runs use; if it reports none, the filter instruments nothing and a clean summary
of the real runs would prove nothing. The launch goes straight to the native module (the
Python wrapper would refuse it): it claims 64 rows where the buffers hold 4.
"""

import tileaot  # noqa: F401  (the installed build)
import torch
from tileaot import _lib

rows, n = 4, 4096
x = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x)
claimed = 64
_lib.native().launch(
    _lib.handle("rms_norm", "bf16"),
    0,
    _lib.current_stream(0),
    (x.data_ptr(), w.data_ptr(), y.data_ptr()),
    (claimed, n, n, claimed, n),
    (1e-6,),
)
torch.cuda.synchronize()
print("control launch returned")
