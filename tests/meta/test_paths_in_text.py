"""Every repository path the source's comments and the documentation name exists: a moved file leaves no stale
pointer behind (reviews found `align/nullspace.py` and `tests/test_options.py` months after the moves)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a file path: folders, then a file with one of these suffixes
PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w.-]+\.(?:py|sh|md|yaml|toml|json))(?![\w/-])")
# where a relative path may start: the repository, the package, the docs, the tests, the benchmarks
BASES = [ROOT, ROOT / "src", ROOT / "src" / "glmc", ROOT / "docs", ROOT / "tests", ROOT / "benchmarks"]


def _texts():
    yield from (ROOT / "src").rglob("*.py")
    yield from (ROOT / "docs").rglob("*.md")
    yield from (ROOT / "benchmarks").glob("*.py")
    yield from (ROOT / "scripts").glob("*.py")
    yield ROOT / "README.md"


def _stale(text: str, here: Path) -> list[str]:
    out = []
    for match in PATH.finditer(text):
        path = match.group(1)
        if path.split("/")[0].isupper():
            continue  # a placeholder: OUT/cells/NAME.json
        if not any((base / path).exists() for base in [*BASES, here.parent]):
            out.append(path)
    return out


def test_paths_named_in_comments_and_docs_exist():
    stale = {str(f.relative_to(ROOT)): bad for f in _texts() if (bad := _stale(f.read_text(), f))}
    assert not stale, stale


def test_the_check_finds_a_stale_path(tmp_path):
    assert _stale("see align/nullspace.py and glmc/matching/nullspace.py", tmp_path / "x.md") == \
        ["align/nullspace.py"]
