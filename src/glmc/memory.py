"""Process memory: give freed tensor memory back to the operating system, and read the peak.

glibc serves allocations above a *dynamic* mmap threshold from the heap once a big block has been freed, and
heap memory is rarely returned: a command that builds and drops per-layer temporaries of a large model then
keeps their peak resident. A fixed threshold (16 MiB) keeps every block of that size or more in its own mapping,
which is unmapped when freed. Measured on `glmc align --method weight` of two GPT-2-124M-shaped checkpoints
(benchmarks/scale.py): peak resident memory 6.3 → 5.7 GB at the same speed (1 MiB: 4.9 GB but 35 % slower,
every small temporary then faulting in fresh pages). Blocks under the threshold (a 768×3072 float32 matrix is
9 MB) are freed into per-thread arenas that glibc keeps; `trim` hands their free pages back, and the streaming
loops call it once per block: after one iteration on the same pair, 3.3 GB resident of which 1.1 GB free heap,
1.8 GB after trimming.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import resource
import sys
import tempfile
import time

import numpy as np
import torch

M_MMAP_THRESHOLD = -3  # malloc.h


def release_freed_memory(threshold: int = 16 << 20) -> bool:
    """Fix glibc's mmap threshold (Linux only; elsewhere a no-op). True if it was set."""
    libc = _libc()
    if not libc or not hasattr(libc, "mallopt"):  # not glibc (musl has no mallopt)
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))


_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        try:
            linux = sys.platform.startswith("linux")
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6") if linux else False
        except OSError:
            _LIBC = False
    return _LIBC


# malloc_trim walks every arena: 43 ms a call on a Pythia-410M alignment, which the streaming loops made 200 times
# (9 s of 127). Calls closer than this to the last one are skipped; what they would return waits at most this long
TRIM_EVERY_S = 1.0
_LAST_TRIM = [-1e9]


def trim(force: bool = False) -> None:
    """Return the free pages of every malloc arena to the operating system (glibc; elsewhere a no-op), at most
    once every TRIM_EVERY_S seconds unless `force`."""
    libc = _libc()
    now = time.monotonic()
    if libc and hasattr(libc, "malloc_trim") and (force or now - _LAST_TRIM[0] >= TRIM_EVERY_S):
        libc.malloc_trim(0)
        _LAST_TRIM[0] = time.monotonic()


MADV_PAGEOUT = 21  # Linux 5.4+: reclaim now; clean file pages are dropped, anything else is kept or swapped
PAGE = 4096


class FilePages:
    """The checkpoint files (*.safetensors) mapped into this process, read once from /proc/self/maps, and a way to
    hand back the resident pages behind given tensors. safetensors loads weights by mmap, so a loaded model's
    weights are file pages, counted in RSS once touched. The pages are clean copies of the file: the kernel
    re-reads them when they are next used, and no content is ever lost (pages a write has copied are never
    dropped, only paged out: _unmodified). Tensors in anonymous memory are left alone. Off Linux every call is a
    no-op."""

    def __init__(self):
        self.ranges: list[tuple[int, int]] = []
        libc = _libc()
        if not libc or not hasattr(libc, "madvise"):
            return
        try:
            lines = open("/proc/self/maps").read().splitlines()
        except OSError:
            return
        for line in lines:
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/") and _is_weights(fields[5]):
                start, end = (int(x, 16) for x in fields[0].split("-"))
                self.ranges.append((start, end))
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    def release(self, tensors) -> int:
        """Page out the mapped file pages that hold `tensors` (a tensor or an iterable of them); returns the bytes
        advised. Pages shared with a neighbouring tensor go too: they are read back if that one is used."""
        if not self.ranges:
            return 0
        advised = 0
        for t in [tensors] if hasattr(tensors, "untyped_storage") else tensors:
            if t.device.type != "cpu":
                continue
            # the tensor's own extent: a loaded model's tensors can be views into one storage spanning the file
            span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride())) if t.numel() else 0
            lo = t.data_ptr()
            hi = lo + span * t.element_size()
            for start, end in self.ranges:
                a, b = max(lo, start) // PAGE * PAGE, -(-min(hi, end) // PAGE) * PAGE
                if a < b and _libc().madvise(a, b - a, MADV_DONTNEED if _unmodified(a, b) else MADV_PAGEOUT) == 0:
                    advised += b - a
        return advised


# real paths of weight files checked at load (a cache snapshot's files are symlinks to blobs named by hash)
_WEIGHT_FILES: set[str] = set()


def register_weight_files(files) -> None:
    """Record the real paths of checkpoint weight files, so FilePages recognises their mappings by name."""
    _WEIGHT_FILES.update(os.path.realpath(f) for f in files)


def _is_weights(mapped: str) -> bool:
    return mapped.endswith((".safetensors", ".bin")) or mapped in _WEIGHT_FILES


MADV_DONTNEED = 4
PAGEMAP_FILE_PAGE = 1 << 61  # /proc/PID/pagemap: the page is the file's own (shared with the page cache)
PAGEMAP_PRESENT = 1 << 63


def _unmodified(a: int, b: int) -> bool:
    """True if every resident page of [a, b) in a private file mapping is still the file's page, not a modified
    copy-on-write copy (read from /proc/self/pagemap, 8 bytes per page). Such a range can be dropped with
    MADV_DONTNEED, which is instant and leaves the pages in the page cache for the next read, where MADV_PAGEOUT
    evicts them (a forward pass over a 124M model then takes 1 s instead of 0.2 s); dropping a modified page would
    lose the modification, so anything else, or no pagemap, takes MADV_PAGEOUT."""
    try:
        with open("/proc/self/pagemap", "rb") as f:
            f.seek(a // PAGE * 8)
            raw = f.read((b - a) // PAGE * 8)
    except OSError:
        return False
    if len(raw) != (b - a) // PAGE * 8:
        return False

    entries = np.frombuffer(raw, dtype=np.uint64)
    present = (entries & np.uint64(PAGEMAP_PRESENT)) != 0
    return bool(((entries[present] & np.uint64(PAGEMAP_FILE_PAGE)) != 0).all())


@contextlib.contextmanager
def paged_forward(model):
    """Within the block, each module's mapped weights are paged out again right after the module has run, so a
    forward pass over a memory-mapped checkpoint keeps about one layer of it resident instead of all of it (the
    function checks run each model once; nothing needs its pages afterwards)."""
    pages = FilePages()
    if not pages.ranges and not any(is_parked(p) for p in model.parameters()):
        yield model
        return

    def after(module, args, output):
        own = list(module.parameters(recurse=False)) + list(module.buffers(recurse=False))
        pages.release(own)
        release_parked(own)

    hooks = [m.register_forward_hook(after) for m in model.modules()
             if next(m.parameters(recurse=False), None) is not None]
    try:
        yield model
    finally:
        for h in hooks:
            h.remove()


def park(view: dict, keys, min_elements: int = 1 << 22) -> list[str]:
    """Move the big CPU tensors of `view` under `keys` (at least `min_elements` entries) into unlinked temporary
    files on disk, each replaced in `view` by a private mapping of its file with the same contents: its pages are
    resident only once read, so a tensor the caller will not read for a while costs no memory meanwhile (weight
    matching parks the vocabulary matrices between its first residual map and the end). Nothing is parked off
    Linux, or where the temporary directory is in memory (tmpfs), where it would only hide memory, or when a file
    cannot be written. Returns the keys parked."""

    directory = tempfile.gettempdir()
    if not sys.platform.startswith("linux") or _in_memory(directory):
        return []
    parked = []
    for k in keys:
        t = view.get(k)
        if t is None or t.device.type != "cpu" or t.numel() < min_elements or t.requires_grad or is_parked(t):
            continue
        fd, path = tempfile.mkstemp(prefix="glmc-park-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                t.contiguous().numpy().tofile(f)
            mapped = torch.from_file(path, shared=False, size=t.numel(), dtype=t.dtype).reshape(t.shape)
        except (OSError, RuntimeError, TypeError):
            continue  # a full disk, or a dtype numpy cannot write: the tensor stays where it is
        finally:
            os.unlink(path)  # the mapping keeps the data; the disk space goes with it
        view[k] = mapped
        _PARKED[mapped.untyped_storage().data_ptr()] = mapped.untyped_storage().nbytes()
        parked.append(k)
    trim()
    return parked


# storage address -> bytes of every parked mapping. Tensors reshaped from a parked one share its storage, so a
# rebuilt model's parameters are found too. An entry can outlive its mapping and the address be reused; that is
# safe because release_parked drops only ranges whose resident pages are all unmodified file pages (_unmodified),
# which any mapping can re-read from its file
_PARKED: dict[int, int] = {}


def is_parked(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" and t.untyped_storage().data_ptr() in _PARKED


def release_parked(tensors) -> None:
    """Drop the resident pages of parked tensors among `tensors` (others are ignored): a streaming pass calls this
    on each block when it is done with it, so a parked model costs resident memory one block at a time. The pages
    stay in the page cache, and are read back from it (or the disk) when next used; pages an in-place write has
    modified are kept (_unmodified)."""
    libc = _libc()
    if not libc or not hasattr(libc, "madvise"):
        return
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for t in tensors:
        if t is None or not is_parked(t):
            continue
        start = t.untyped_storage().data_ptr()
        end = -(-(start + _PARKED[start]) // PAGE) * PAGE
        if start % PAGE == 0 and _unmodified(start, end):
            libc.madvise(start, end - start, MADV_DONTNEED)


def release_keys(keys, *views) -> None:
    """release_parked of every view's tensors under `keys` (keys a view lacks are skipped)."""
    release_parked([v[k] for v in views for k in keys if k in v])


def _in_memory(directory: str) -> bool:
    """True if `directory` is on an in-memory filesystem (or that cannot be told)."""
    try:
        mounts = [line.split() for line in open("/proc/mounts")]
    except OSError:
        return True
    real = os.path.realpath(directory)
    best = max((m for m in mounts if len(m) > 2 and (real == m[1] or real.startswith(m[1].rstrip("/") + "/"))),
               key=lambda m: len(m[1]), default=None)
    return best is None or best[2] in ("tmpfs", "ramfs")


def row_slices(rows: int, cols: int, elements: int = 1 << 21):
    """Slices over `rows` rows of `cols` columns, each at most `elements` entries (one row at least): reductions
    done a slice at a time keep their temporaries at that size (16 MB in float64 by default) instead of a copy of
    the whole matrix."""
    step = max(1, elements // max(1, cols))
    return [slice(i, i + step) for i in range(0, rows, step)]


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far, GB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1e9 if sys.platform == "darwin" else 1e6)
