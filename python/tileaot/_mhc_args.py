"""Argument checks the mHC ops share beyond their schemas (one module they all import: no op
module imports another's checks)."""

from __future__ import annotations

from typing import Any


def same_lead(name: str, t: Any, tail: int, like_name: str, like: Any, like_tail: int) -> None:
    """ValueError unless `t`'s leading dims (all but its last `tail`) equal `like`'s (the schema
    ties only their products)."""
    lead, want = tuple(t.shape[: t.dim() - tail]), tuple(like.shape[: like.dim() - like_tail])
    if lead != want:
        raise ValueError(
            f"{name} has leading dims {lead}; they must match {like_name}'s {want} "
            f"({name} shape {tuple(t.shape)}, {like_name} shape {tuple(like.shape)})"
        )
