"""`glmc demo` end to end with a tiny budget: trains, caches, aligns, prints the table, writes the files."""

import json

import pytest

from conftest import run_cli


@pytest.mark.slow
def test_demo_runs_and_reuses_its_models(tmp_path):
    out = run_cli("demo", "--out", tmp_path, "--steps", 20, "--methods", "none,weight", "--max-batches", 2,
                  "--no-progress")
    assert "Loss barriers" in out and "weight" in out
    res = json.loads((tmp_path / "barriers.json").read_text())
    assert set(res["results"]) == {"none", "weight"}
    assert (tmp_path / "barriers.png").stat().st_size > 10_000
    again = run_cli("demo", "--out", tmp_path, "--steps", 20, "--methods", "none", "--max-batches", 2,
                    "--no-progress")
    assert again.count("reusing") == 2


@pytest.mark.slow
def test_llama_demo_runs_every_method(tmp_path):
    out = run_cli("demo", "--family", "llama", "--out", tmp_path, "--steps", 10, "--max-batches", 2, "--no-progress")
    res = json.loads((tmp_path / "barriers.json").read_text())
    assert list(res["results"]) == ["none", "activation", "weight", "learned"] and res["demo"]["family"] == "llama"
    assert (tmp_path / "llama-seed0" / "config.json").is_file() and "Llama decoders" in out
