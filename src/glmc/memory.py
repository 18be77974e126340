"""Process memory: give freed tensor memory back to the operating system, and read the peak.

glibc serves allocations above a *dynamic* mmap threshold from the heap once a big block has been freed, and
heap memory is rarely returned: a command that builds and drops per-layer temporaries of a large model then
keeps their peak resident. A fixed threshold (16 MiB) keeps every block of that size or more in its own mapping,
which is unmapped when freed. Measured on `glmc align --method weight` of two GPT-2-124M-shaped checkpoints
(benchmarks/scale.py): peak resident memory 6.3 → 5.7 GB at the same speed (1 MiB: 4.9 GB but 35 % slower,
every small temporary then faulting in fresh pages).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
import sys

M_MMAP_THRESHOLD = -3  # malloc.h


def release_freed_memory(threshold: int = 16 << 20) -> bool:
    """Fix glibc's mmap threshold (Linux only; elsewhere a no-op). True if it was set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far, GB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1e9 if sys.platform == "darwin" else 1e6)
