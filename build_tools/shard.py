"""Split the matrix over machines and merge their outputs into one gen folder.

    machine k:  python -m build_tools generate --out shard_k --shard k/N [--archs ... --ops ...]
                python -m build_tools compile-all shard_k          # optional: cubins too
    then:       python -m build_tools merge gen shard_1 ... shard_N

A shard is a whole gen folder for its variants (so compile-all works on it) plus shard/:
shard.json (which slice of which matrix) and traced.json (the traced data `merge` emits from).
Variants are dealt round-robin in matrix order, so every shard gets a share of every op.
A variant's sources never appear in another variant (each carries its own kernel symbol),
so cubins compiled on a shard are exactly the merged build's cubins of the same name.
The merged folder is what a one-machine `generate` writes (same manifest, registry, sources),
because tracing is deterministic. TileLang 0.1.15 alone is not: same-named shared buffers
(reduction workspaces of engram_gate*, rms_norm, ...) get their slots in heap-address order
(tile-ai/tilelang PR #3108); build_tools/smem_slots.py makes those sources canonical and
tests/test_trace_determinism.py checks it.
"""

from __future__ import annotations

import json
from pathlib import Path

SHARD_FORMAT = 1


def parse_shard(text: str) -> tuple[int, int]:
    """'2/4' -> (2, 4): shard 2 of 4, counted from 1."""
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard {text!r}: want INDEX/COUNT, e.g. 1/2") from None
    if not 1 <= index <= count:
        raise SystemExit(f"--shard {text!r}: INDEX must be 1..{count}")
    return index, count


def select_shard(points: list, index: int, count: int) -> list:
    return points[index - 1 :: count]


def write_shard_data(out: Path, shard, module: str, archs, ops, points, traced) -> None:
    from importlib.metadata import version

    from build_tools.fsutil import write_if_different

    info = {
        "format": SHARD_FORMAT,
        "shard": list(shard),
        "specs": module,
        "archs": list(archs),
        "ops": list(ops),
        "tilelang": version("tilelang"),
        "variants": [p.name for p in points],
    }
    data = {f"{name}@{arch}": value for (name, arch), value in sorted(traced.items())}
    write_if_different(out / "shard" / "shard.json", json.dumps(info, indent=1) + "\n")
    write_if_different(out / "shard" / "traced.json", json.dumps(data, sort_keys=True) + "\n")


def _read_shards(dirs: list[Path]) -> list[dict]:
    infos = []
    for d in dirs:
        path = d / "shard" / "shard.json"
        if not path.is_file():
            raise SystemExit(
                f"{d} is not a shard: no shard/shard.json (make it with "
                "`python -m build_tools generate --shard INDEX/COUNT`)"
            )
        infos.append(json.loads(path.read_text()) | {"dir": d})
    first = infos[0]
    for info in infos[1:]:
        for field in ("format", "specs", "archs", "ops", "tilelang"):
            if info[field] != first[field]:
                raise SystemExit(
                    f"shards disagree on {field}: {first['dir']} has "
                    f"{first[field]!r}, {info['dir']} has {info[field]!r}"
                )
    count = first["shard"][1]
    indices = sorted(info["shard"][0] for info in infos)
    if indices != list(range(1, count + 1)) or any(i["shard"][1] != count for i in infos):
        have = ", ".join(f"{i['shard'][0]}/{i['shard'][1]}" for i in infos)
        raise SystemExit(f"need each of shards 1/{count} ... {count}/{count} once; got {have}")
    return infos
