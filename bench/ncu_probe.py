"""Run chosen bench cases' tileaot call once each, for a profiler to watch.

    ncu --clock-control none -k regex:NAME --section SpeedOfLight ... \
        python bench/ncu_probe.py REGEX

Each case is made (inputs allocated, random) and its tileaot call run twice: the first call
loads the module, the second is the one worth profiling (use ncu's --launch-skip or -c).
"""

from __future__ import annotations

import re
import sys

import torch
from run import load_cases


def main() -> int:
    pattern = re.compile(sys.argv[1] if len(sys.argv) > 1 else ".")
    for label, size, make in load_cases():
        if pattern.search(label):
            ours = make()[0]
            ours()
            ours()
            torch.cuda.synchronize()
            print(f"ran {label} {size}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
