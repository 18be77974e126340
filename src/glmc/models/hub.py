"""Hub ids in the local Hugging Face cache, resolved without any network access.

The cache (huggingface_hub's layout, read directly): ``CACHE/models--ORG--NAME/`` holds ``blobs/`` (file contents
named by hash), ``refs/REVISION`` (a text file holding the commit hash a branch or tag pointed to when it was
downloaded) and ``snapshots/COMMIT/`` (the files of that commit, as symlinks into blobs/). CACHE is ``cache_dir``,
else $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub, read when called (as huggingface_hub does at
import). A revision is a ref name (main, step1000, refs/pr/1) or a commit hash (full, or a unique prefix of at least
7 characters, among the cached snapshots). Nothing is ever downloaded: what is missing is one line naming the `hf
download` command (huggingface_hub's CLI) that fetches it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from glmc.errors import BadCheckpoint

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
HASH = re.compile(r"^[0-9a-f]{7,40}$")


def cache_root(cache_dir=None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def split_id(text: str) -> tuple[str, str | None]:
    """("ORG/NAME", "REVISION" or None) from "ORG/NAME" or "ORG/NAME@REVISION"."""
    repo, _, rev = text.partition("@")
    return repo, rev or None


def looks_like_hub_id(text: str) -> bool:
    return bool(HUB_ID.match(split_id(text)[0]))


def snapshot(text: str, revision=None, cache_dir=None) -> Path:
    """The cached snapshot directory of hub id `text` ("ORG/NAME" or "ORG/NAME@REV") at `revision` (default: the
    id's own, else main); BadCheckpoint naming the download command when it is not cached."""
    repo, own = split_id(text)
    if not looks_like_hub_id(text):
        raise BadCheckpoint(f"{text}: no such directory")
    if own is not None and revision is not None and own != revision:
        raise BadCheckpoint(f"{text} names revision {own!r} but --revision says {revision!r}; give one")
    rev = own or revision
    root = cache_root(cache_dir)
    folder = root / f"models--{repo.replace('/', '--')}"
    fetch = f"hf download {repo}" + (f" --revision {rev}" if rev else "")
    if not (folder / "snapshots").is_dir():
        raise BadCheckpoint(f"{text} is neither a directory nor a model in the local Hugging Face cache ({root}); "
                            f"give a model directory, or download it first: {fetch}")
    commit = _commit(folder, rev or "main")
    if commit is None:
        cached = ", ".join(_cached_names(folder)) or "none"
        raise BadCheckpoint(f"revision {rev or 'main'!r} of {repo} is not in the local Hugging Face cache ({root}; "
                            f"cached: {cached}); download it first: hf download {repo} --revision {rev or 'main'}")
    return folder / "snapshots" / commit


def _commit(folder: Path, rev: str) -> str | None:
    ref = folder / "refs" / rev
    if ".." not in Path(rev).parts and ref.is_file():
        commit = ref.read_text().strip()
        return commit if (folder / "snapshots" / commit).is_dir() else None
    if HASH.match(rev):
        found = [d.name for d in (folder / "snapshots").iterdir() if d.is_dir() and d.name.startswith(rev)]
        return found[0] if len(found) == 1 else None
    return None


def _cached_names(folder: Path) -> list[str]:
    refs = folder / "refs"
    names = sorted(str(f.relative_to(refs)) for f in refs.rglob("*") if f.is_file()) if refs.is_dir() else []
    named = {(refs / n).read_text().strip() for n in names}
    return names + sorted(d.name[:12] for d in (folder / "snapshots").iterdir() if d.is_dir() and d.name not in named)
