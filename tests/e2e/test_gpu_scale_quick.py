"""benchmarks/gpu_scale.sh's quick form on the CPU: every step of the GPU scale check runs, at tiny shapes, and its
result files say what ran and that every transform kept the function."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_scale_quick_form_runs_every_step(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, CACHE=str(tmp_path / "cache"), OUT=str(tmp_path / "out"))
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_scale.sh"), "cpu", "--quick"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "gpu_scale.json").read_text())
    rows = record["rows"]
    assert [(r["step"], r["pair"]) for r in rows] == [
        ("align", "gpt2-124m"), ("align", "pythia-410m"), ("align", "tinyllama-1.1b"),
        ("learned-step", "gpt2-124m"), ("learned-step", "pythia-410m"), ("barrier", "pythia-410m")]
    assert all(r["ok"] and r["wall_seconds"] > 0 and r["peak_rss_gb"] > 0 for r in rows)
    for r in rows:
        if r["step"] != "barrier":
            assert r["max_dlogits"] <= 1e-4, r
        assert r["device_peak_gb"] is None  # no device memory on the CPU
    assert all(r["iterations"] >= 1 for r in rows if r["step"] == "align")
    assert rows[-1]["points"] == 5 and rows[-1]["loss_mid"] > 0
    assert record["quick"] is True and record["provenance"]["device"]
    assert "| align | tinyllama-1.1b | yes |" in (tmp_path / "out" / "gpu_scale.md").read_text()
