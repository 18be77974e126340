"""`glmc report`: one self-contained HTML page, opened in a real headless browser (Chromium)."""

import json
import re
import shutil
import subprocess

import pytest

from conftest import run_cli

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def _browser():
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None:
        pytest.skip("no Chromium found (install Debian's `chromium` package, as scripts/setup.sh does as root)")
    return found


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    run_cli("barrier", *runs, "--align", "none,weight", "--points", 3, "--max-batches", 2, "--batch-size", 8,
            "--decompose", "--decompose-points", 3, "--json", root / "b.json", "--no-progress")
    s0, s1 = (r / "checkpoints" for r in runs)
    run_cli("sweep", "--at", f"step3={s0 / 'step3'}:{s1 / 'step3'}", "--at", f"step6={s0 / 'step6'}:{s1 / 'step6'}",
            "--align", "none", "--points", 3, "--max-batches", 2, "--batch-size", 8, "--jobs", 2, "-o", root / "sw")
    out = run_cli("report", root / "b.json", root / "sw", "-o", root / "report.html", "--title", "test report")
    assert "3 figures" in out
    return root


def test_report_is_self_contained(report):
    text = (report / "report.html").read_text()
    assert text.count("<img ") == 3 and text.count("src='data:image/png;base64,") == 3
    assert not re.search(r"(src|href)=['\"]?(https?:|//)", text)  # nothing fetched from elsewhere


def test_report_refuses_what_is_not_a_result(tmp_path, report):
    from click.testing import CliRunner

    from glmc.cli import main

    (tmp_path / "x.json").write_text(json.dumps({"schema": "other/1"}))
    r = CliRunner().invoke(main, ["report", str(tmp_path / "x.json"), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 1 and "not a glmc barrier, simplex or sweep result" in r.output
    r = CliRunner().invoke(main, ["report", str(tmp_path), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 1 and "without sweep.json" in r.output


def test_report_renders_in_headless_chromium(report, tmp_path):
    browser = _browser()
    page = (report / "report.html").resolve().as_uri()
    dom = subprocess.run([browser, *FLAGS, "--dump-dom", page], capture_output=True, text=True, timeout=120).stdout
    assert "3 of 3 figures drawn" in dom, dom[-2000:]  # every embedded PNG decoded by the browser
    assert dom.count('data-drawn="yes"') == 3
    barrier = json.loads((report / "b.json").read_text())["results"]
    for method, r in barrier.items():
        assert f"{r['loss_barrier']:.4f}" in dom and f"{r['loss_barrier_se']:.4f}" in dom, method
        dec = r["decomposition"]["parts"]["cells"]["mlp@1"]
        assert f"{dec['only']['end_loss']:.4f}" in dom and f"{dec['all_but']['end_loss']:.4f}" in dom
    for row in json.loads((report / "sw" / "sweep.json").read_text())["rows"]:
        assert f"{row['loss_barrier']:.4f}" in dom and f"{row['peak_rss_mb']:.4f}" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *FLAGS, "--window-size=1200,2400", f"--screenshot={shot}", page], capture_output=True,
                   timeout=120)
    from matplotlib.image import imread

    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1200)
    inked = (pixels.min(axis=-1) < 0.9).mean()  # share of pixels that are not (near) white
    assert inked > 0.05, inked  # text, tables and figures, not a blank page
    colour = (pixels.max(axis=-1) - pixels.min(axis=-1) > 0.3).mean()
    assert colour > 0.005, colour  # the plots' coloured lines and heat maps were drawn
