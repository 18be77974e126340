"""Static checks CI runs with the tests: ruff (pyflakes, pycodestyle, import order, bugbear, pyupgrade) on the whole
tree and mypy on the public API (configured in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.is_file() else shutil.which(name)
    assert found, f"{name} is not installed: pip install -e '.[test]' (scripts/setup.sh does)"
    return found


def test_ruff():
    r = subprocess.run([_tool("ruff"), "check", "src", "tests", "benchmarks", "examples", "scripts"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_on_the_public_api():
    r = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
