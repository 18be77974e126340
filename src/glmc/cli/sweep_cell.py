"""One cell of `glmc sweep`, in its own process: `python -m glmc.cli.sweep_cell TARGET.json barrier A B …`.

Runs the `glmc barrier` command line given, then writes its JSON to TARGET.json (atomically, so the file exists
only for a finished cell) with "cell" (the grid coordinates from the arguments) and "resources": wall_seconds,
peak_rss_mb (this process's peak resident memory), peak_cuda_mb (None without CUDA) and threads.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    target, args = Path(argv[0]), argv[1:]
    import torch

    threads = int(os.environ.get("GLMC_THREADS", "0") or 0)
    if threads:
        torch.set_num_threads(threads)
    partial = target.with_name(f".{target.stem}.partial.json")
    from glmc.cli import main as cli

    t0 = time.perf_counter()
    try:
        cli([*args, "--json", str(partial)], standalone_mode=True)
    except SystemExit as e:
        if e.code not in (0, None):
            return int(e.code) if isinstance(e.code, int) else 1
    result = json.loads(partial.read_text())
    cuda = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() and torch.cuda.is_initialized() \
        else None
    result["resources"] = {"wall_seconds": time.perf_counter() - t0, "threads": torch.get_num_threads(),
                           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                           "peak_cuda_mb": cuda}
    from glmc.io import atomic_path

    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(result, indent=2, default=str) + "\n")
    partial.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
