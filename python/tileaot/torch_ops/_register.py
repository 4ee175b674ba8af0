"""Register tileaot's `OpSpec`s (`_specs`) as torch custom ops, through the op-agnostic
`tileaot._schema_torch`: functional ``<op>`` and mutating ``<op>_out``, their autograd, the
stand-ins for ``torch.compile``."""

from __future__ import annotations

from .. import _schema_torch
from ._autograd import register_autograd
from ._specs import SPECS
from ._substitute import OUTS_OF, RESULTS_OF

NAMESPACE = "tileaot"


def register() -> None:
    """Register every op as ``torch.ops.tileaot.<op>`` and ``<op>_out``; later calls do nothing."""
    _schema_torch.register_specs(NAMESPACE, lambda: SPECS, register_autograd, OUTS_OF, RESULTS_OF)


def op_names() -> tuple[str, ...]:
    """Names under ``torch.ops.tileaot`` (functional ops and their ``_out`` variants)."""
    return _schema_torch.registered(NAMESPACE)
