"""Atomic file and directory writes: outputs appear whole or not at all, inputs are never touched.

A directory output is written into a hidden temporary directory beside it (``.NAME.XXXX.tmp``) and swapped into
place:
- where the kernel and file system allow it (Linux ``renameat2(RENAME_EXCHANGE)``), by one atomic exchange of the
  two directories, after which the old output (now under the temporary name) is deleted: at every instant NAME is
  either the whole previous output or the whole new one;
- elsewhere by two renames, NAME → ``.NAME.old`` then the temporary directory → NAME. A kill between the two
  leaves no NAME but the whole previous output in ``.NAME.old`` and the whole new one in the temporary directory;
  the next run on the same output (``recover``) puts ``.NAME.old`` back as NAME before doing anything else.

Every write to NAME holds a lock (``lock_output``: an flock on ``.NAME.lock`` beside it), so a second run on the
same output is refused with one line while the first runs, never interleaved; the lock is released by the kernel
when its process dies, however it dies. SIGINT and SIGTERM (``terminate_cleanly``) unwind the write and remove the
temporary entries and the lock file; after SIGKILL, which no process can intercept, the hidden entries stay until
the next run on the same output removes them (under the lock, they can only be left over).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

from glmc.errors import BadOption


def _default_mode(directory: bool) -> int:
    # mkstemp/mkdtemp create private (0600/0700) entries; outputs should get the usual umask-based mode
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if directory else 0o666) & ~mask


# ------------------------------------------------------------------------------------------------ locks

_HELD: dict[str, int] = {}  # real output path -> lock depth held by this process (re-entrant)


class OutputBusy(BadOption):
    """Another process is writing the same output."""


def _lock_file(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


@contextlib.contextmanager
def lock_output(path):
    """Hold the lock on output `path` for the block (re-entrant within a process). Raises OutputBusy, one line,
    if another process holds it. Also recovers what a killed earlier run left beside `path` (see the module
    docstring), which is safe only under the lock."""
    import fcntl

    path = Path(path).absolute()
    key = os.path.realpath(path)
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    created = _make_parents(path.parent)
    lock = _lock_file(path)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise OutputBusy(f"another glmc run (process {holder}) is writing {path}; wait for it to finish or "
                             "choose another output path") from None
        try:  # the file may have been removed by its last holder between our open and our lock: retry
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    _HELD[key] = 1
    try:
        recover(path)
        yield
    finally:
        del _HELD[key]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        os.close(fd)  # releases the flock
        for d in created:  # folders made for an output that was never written go again
            with contextlib.suppress(OSError):
                d.rmdir()


def _make_parents(directory: Path) -> list[Path]:
    """mkdir -p `directory`; the folders it created, deepest first."""
    missing = []
    d = directory
    while not d.exists() and d != d.parent:
        missing.append(d)
        d = d.parent
    directory.mkdir(parents=True, exist_ok=True)
    return missing


def recover(path) -> None:
    """Undo what a killed write to `path` left behind (call under its lock): a previous output parked as
    ``.NAME.old`` with no NAME goes back to NAME; leftover temporary entries are deleted."""
    path = Path(path)
    old = path.with_name(f".{path.name}.old")
    if old.exists() and not path.exists():
        os.replace(old, path)
    for leftover in [old, *path.parent.glob(f".{path.name}.*.tmp")]:
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        elif leftover.exists() or leftover.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


# ------------------------------------------------------------------------------------------------ writes

@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary file path beside `path`; renames it onto `path` only if the block succeeds."""
    path = Path(path)
    with lock_output(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            yield Path(tmp)
            os.chmod(tmp, _default_mode(False))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


@contextlib.contextmanager
def atomic_dir(path, overwrite: bool = True, inputs=()):
    """Yields a temporary directory beside `path`; swaps it into place only if the block succeeds (see the module
    docstring). `inputs`: paths the output must not be, contain or lie inside (check_not_input)."""
    path = Path(path)
    check_not_input(path, inputs)
    with lock_output(path):
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} exists (pass --overwrite to replace it)")
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        try:
            yield tmp
            os.chmod(tmp, _default_mode(True))
            if path.exists() and _exchange(tmp, path):
                shutil.rmtree(tmp, ignore_errors=True)  # the previous output, now under the temporary name
            elif path.exists():
                old = path.with_name(f".{path.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                os.replace(path, old)
                os.replace(tmp, path)  # a kill before this line is undone by recover() on the next run
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


RENAME_EXCHANGE = 2  # linux/fs.h
AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange the directory entries `a` and `b` (Linux renameat2); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


# ------------------------------------------------------------------------------------------------ inputs

def _real_entries(path) -> set[str]:
    """The real paths of an input: itself and, for a directory, every entry in it (a cache snapshot's files are
    symlinks into shared blobs)."""
    p = Path(path)
    out = {os.path.realpath(p)}
    if p.is_dir():
        for f in p.iterdir():
            out.add(os.path.realpath(f))
    return out


def _within(child: str, parent: str) -> bool:
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def check_not_input(out, inputs) -> None:
    """Refuse an output path that is, contains or lies inside one of `inputs` (compared as resolved real paths,
    each input's files included), with one line naming both: replacing it would destroy an input."""
    if not inputs:
        return
    real_out = os.path.realpath(out)
    for given in inputs:
        if given is None:
            continue
        entries = _real_entries(given)
        top = os.path.realpath(given)
        if _within(real_out, top) or any(_within(e, real_out) for e in entries):
            how = ("is" if real_out == top else "lies inside" if _within(real_out, top) else "contains")
            raise BadOption(f"the output {out} {how} the input {given}: glmc never writes over its inputs; choose "
                            "another output path")


# ------------------------------------------------------------------------------------------------ signals

def terminate_cleanly() -> None:
    """Make SIGTERM unwind like Ctrl-C (KeyboardInterrupt), so atomic writes remove their temporary entries and
    locks; only in the main thread, where Python runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def read_yaml(path, what: str = "file"):
    """The YAML document at `path` (a sweep file, a merge recipe); BadOption in one line for a missing file or
    YAML that does not parse, with the line it broke on."""
    import yaml  # type: ignore[import-untyped]  # no stubs are installed

    p = Path(path)
    if not p.is_file():
        raise BadOption(f"{what} not found: {path}")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise BadOption(f"{path} is not valid YAML{at}: {getattr(e, 'problem', e)}") from None
