"""How the stand-ins (`tileaot._schema_torch.substitute`: ``torch.compile`` traces a call of
``tileaot.<op>(...)`` as the op) differ for the ops whose function returns something other than
the op's outputs, or takes a shorter ``out``; every other op uses the defaults there."""

from __future__ import annotations

from typing import Any

import torch

from ..moe_expand import MoeExpandResult


def _engram_gate_outs(out: Any, n_out: int, given: dict) -> tuple:
    """``out`` alone (the gate then goes to a new tensor, as in the wrapper) or ``(out, g)``."""
    if isinstance(out, (tuple, list)):
        return tuple(out)
    h = given["h"]
    return out, h.new_empty(h.shape[:-1], dtype=torch.float32)


OUTS_OF = {"engram_gate": _engram_gate_outs}
RESULTS_OF = {
    "engram_gate": lambda result, given: result if given["return_gate"] else result[0],
    "moe_expand": lambda result, given: MoeExpandResult(*result),
}
