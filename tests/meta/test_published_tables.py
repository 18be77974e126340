"""The results tables in the README and docs/results.md are what benchmarks/results/suite.json gives, and that file
holds one run at one clean commit (issue #46): a figure is never typed, nor assembled from several codes."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tables  # noqa: E402  (benchmarks/tables.py)


@pytest.fixture(scope="module")
def suite():
    return tables.load()


def test_the_published_suite_is_one_run_at_one_clean_commit(suite):
    code = tables.one_run(suite)
    assert len(code["commit"]) == 40
    assert suite["provenance"]["code"]["commit"] == code["commit"]  # the report was written by that code too
    for row in suite["rows"]:
        p = row["provenance"]
        assert p["data"]["batches_sha256"] and all(w["fingerprint"] for m in p["models"] for w in m["weights"])
        assert p["options"]["method"] == tables.VARIANT_METHODS.get(row["method"], row["method"])
        assert len(row["curve"]["lambdas"]) == len(row["curve"]["loss"]) == len(row["curve"]["acc_se"])


def test_readme_table_is_the_suite_file(suite):
    assert tables.block(tables.README.read_text(), "readme") == tables.readme_lines(suite)


def test_results_page_is_the_suite_file(suite):
    assert tables.block(tables.RESULTS.read_text(), "results") == tables.results_lines(suite)


def test_a_typed_or_mixed_table_is_caught(suite, tmp_path):
    readme = tmp_path / "README.md"
    first_row = tables.readme_lines(suite)[4]
    readme.write_text(tables.README.read_text().replace(first_row, first_row.replace("|", "| 1.0", 2)))
    assert tables.block(readme.read_text(), "readme") != tables.readme_lines(suite)
    row = suite["rows"][0]
    other = {**row, "provenance": {**row["provenance"], "code": {"commit": "0" * 40, "dirty": False}}}
    with pytest.raises(ValueError, match="different codes"):
        tables.one_run({**suite, "rows": [other, *suite["rows"][1:]]})
    dirty = {**row, "provenance": {**row["provenance"], "code": {**row["provenance"]["code"], "dirty": True}}}
    with pytest.raises(ValueError, match="clean commit"):
        tables.one_run({**suite, "rows": [dirty]})


def test_scale_guide_table_is_the_scale_results():
    """docs/guide/scale.md's table is what benchmarks/results/scale/*.json give, all from one clean commit."""
    import scale_table  # benchmarks/scale_table.py

    rows = scale_table.load()
    assert all(len(r["provenance"]["code"]["commit"]) == 40 and r["max_dlogits"] <= 1e-4 for r in rows)
    assert scale_table.block(scale_table.GUIDE.read_text()) == scale_table.lines(rows)


def test_scale_results_of_two_codes_are_refused(tmp_path):
    import json

    import scale_table

    for name in scale_table.RUNS:
        row = json.loads((scale_table.RESULTS / f"{name}.json").read_text())
        if name == "scale":
            row["provenance"]["code"]["commit"] = "0" * 40
        (tmp_path / f"{name}.json").write_text(json.dumps(row))
    with pytest.raises(ValueError, match="different codes"):
        scale_table.load(tmp_path)
