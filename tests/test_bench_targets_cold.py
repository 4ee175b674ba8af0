"""bench/targets.py's cold-start verdict: a negative difference larger than the budget is
start-to-start noise (undecided), not a met target."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
targets = __import__("targets")


def _rows(base: float, ours: float) -> dict:
    return {"cold_start": {"rows": {targets.TORCH_ROW: base, targets.TILEAOT_ROW: ours}}}


def test_a_small_difference_is_judged():
    (row, _) = targets.cold_targets(_rows(3.40, 3.45))
    assert row["met"] is True and "+0.050 s" in row["measured"]
    (row, _) = targets.cold_targets(_rows(3.40, 3.60))
    assert row["met"] is False


def test_a_baseline_slower_by_more_than_the_budget_is_undecided():
    (row, _) = targets.cold_targets(_rows(5.248, 4.570))
    assert row["met"] is None and "-0.678 s" in row["measured"] and "noise" in row["measured"]
