"""`python -m build_tools merge OUT SHARD...`: the gen folders of `generate --shard i/n` as one.

The merged folder equals a one-machine `generate` of the same matrix. Kept apart from
build_tools/shard.py (which `generate` uses to cut and record shards) so that neither imports
the other's caller.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from build_tools.fsutil import write_if_different
from build_tools.generate import write_gen
from build_tools.matrix import enumerate_variants
from build_tools.shard import _read_shards
from build_tools.specs import load_specs
from build_tools.userconfig import from_env


def merge(out: Path, dirs: list[Path]) -> dict:
    infos = _read_shards([Path(d) for d in dirs])
    first = infos[0]
    specs, archs, ops = load_specs(first["specs"]), tuple(first["archs"]), tuple(first["ops"])
    points = enumerate_variants(specs, archs, ops, from_env())  # the shards' TILEAOT_CONFIG
    wanted = [p.name for p in points]
    got = [name for info in infos for name in info["variants"]]
    if sorted(got) != sorted(wanted):
        missing, extra = sorted(set(wanted) - set(got)), sorted(set(got) - set(wanted))
        raise SystemExit(
            "the shards do not make up this matrix (same specs module, TILEAOT_CONFIG and "
            f"kernels_py on every machine?): missing {missing[:5]}, unexpected {extra[:5]}"
        )
    traced, stats = {}, {}
    for info in infos:
        data = json.loads((info["dir"] / "shard" / "traced.json").read_text())
        traced |= {tuple(k.rsplit("@", 1)): v for k, v in data.items()}
        stats_path = info["dir"] / "stats" / "trace.json"
        if stats_path.is_file():
            stats |= json.loads(stats_path.read_text())
    manifest = write_gen(out, points, traced, first["archs"], first["ops"], first["tilelang"])
    write_if_different(
        out / "stats" / "trace.json", json.dumps(dict(sorted(stats.items())), indent=1) + "\n"
    )
    copied = _copy_cubins(out, manifest, [info["dir"] for info in infos])
    print(
        f"tileaot merge: {len(infos)} shards, {len(wanted)} variants, "
        f"{copied} of {len(manifest['cubins'])} cubins already compiled → {out}",
        file=sys.stderr,
    )
    return manifest


def _copy_cubins(out: Path, manifest: dict, dirs: list[Path]) -> int:
    """Cubins (and their compile stats) the shards already made; the rest compile later."""
    copied = 0
    for entry in manifest["cubins"]:
        for d in dirs:
            src = d / entry["cubin"]
            if src.is_file():
                dest = out / entry["cubin"]
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)  # a fresh mtime: newer than the merged sources
                stats = src.with_name(src.name + ".json")  # compile time, cache hit
                if stats.is_file():
                    shutil.copyfile(stats, dest.with_name(stats.name))
                copied += 1
                break
    return copied


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_tools merge")
    parser.add_argument("out", type=Path, help="the merged gen folder")
    parser.add_argument("shards", type=Path, nargs="+", help="gen folders of generate --shard")
    args = parser.parse_args(argv)
    merge(args.out, args.shards)
    return 0
