"""Every result file glmc writes carries the provenance block, read back from the files (issue #46): a trained
model's glmc.json, align.json, a barrier's JSON (with the whole curve), merge.json, the API's to_json, and
`glmc report` shows it."""

import json

import glmc
from conftest import run_cli
from glmc.options import LearnedOptions, WeightOptions
from glmc.provenance import code_state

FAST = ["--points", 3, "--max-batches", 2, "--batch-size", 8, "--no-progress"]


def check_block(p: dict, models=(), seeds="any"):
    assert p["schema"] == "glmc.provenance/1" and p["glmc"] == glmc.__version__
    assert p["code"] == code_state() and p["code"]["commit"]  # the tests run from a checkout
    assert isinstance(p["code"]["dirty"], bool)
    assert p["versions"]["torch"] and p["versions"]["transformers"] and p["device"]["type"] == "cpu"
    assert p["created"]
    if seeds != "any":
        assert p["seeds"] == seeds
    recorded = [m["path"] for m in p["models"]]
    assert recorded == [str(m) for m in models]
    for m in p["models"]:
        assert m["weights"] and all(len(w["fingerprint"]) == 64 for w in m["weights"])


def test_every_result_file_records_where_it_came_from(runs, tmp_path):
    a, b = runs
    trained = json.loads((a / "glmc.json").read_text())["provenance"]
    check_block(trained, seeds=[0])
    assert trained["options"]["steps"] == 6 and trained["data"]["spec"]["source"] == "shakespeare"

    run_cli("align", a, b, "--method", "weight", "--iterations", 2, "--out", tmp_path / "al", "--no-progress")
    al = json.loads((tmp_path / "al" / "align.json").read_text())["provenance"]
    check_block(al, models=[a, b])
    assert al["options"]["method"] == "weight" and al["options"]["iterations"] == 2
    assert set(WeightOptions.names()) - {"progress"} <= set(al["options"])  # every field, defaults included

    run_cli("barrier", a, b, "--align", "none,learned", "--steps", 2, *FAST, "--json", tmp_path / "b.json")
    result = json.loads((tmp_path / "b.json").read_text())
    check_block(result["provenance"], models=[a, b])
    assert result["provenance"]["data"]["batches"] == 2 and len(result["provenance"]["data"]["batches_sha256"]) == 64
    learned = result["results"]["learned"]
    check_block(learned["provenance"], models=[a, b])
    assert learned["provenance"]["options"]["align"]["steps"] == 2
    assert set(LearnedOptions.names()) - {"progress"} <= set(learned["provenance"]["options"]["align"])
    assert learned["provenance"]["options"]["barrier"]["points"] == 3
    assert len(learned["lambdas"]) == len(learned["loss"]) == len(learned["acc"]) == len(learned["loss_se"]) == \
        len(learned["acc_se"]) == 3
    assert result["provenance"]["data"]["batches_sha256"] == learned["provenance"]["data"]["batches_sha256"]

    run_cli("merge", a, b, "--out", tmp_path / "m", "--no-eval", "--no-progress")
    merged = json.loads((tmp_path / "m" / "merge.json").read_text())["provenance"]
    check_block(merged, models=[a, b])
    assert merged["options"]["method"] == "weight" and "rounds" in merged["options"]

    html = (tmp_path / "r.html")
    run_cli("report", tmp_path / "b.json", "-o", html)
    page = html.read_text()
    assert "Provenance" in page and code_state()["commit"] in page and trained["versions"]["torch"] in page


def test_the_api_results_carry_it_too(runs, tmp_path):
    a, b = (glmc.load_model(r) for r in runs)
    al = glmc.align(a, b, method="weight", iterations=2)
    check_block(al.provenance, models=list(runs))
    curve = glmc.barrier(a, b, align=al, points=3, max_batches=2, batch_size=8, progress=False)
    out = json.loads(curve.to_json(tmp_path / "c.json"))
    check_block(out["provenance"], models=list(runs))
    assert out["provenance"]["options"]["align"]["iterations"] == 2
    assert json.loads((tmp_path / "c.json").read_text()) == out
