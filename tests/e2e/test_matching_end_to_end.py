"""Matching end to end on real checkpoints: candidate selection, the paper's algorithm and circuit mode, learned
matching on GPT-2s trained by `glmc train` (the slow gpt2_pair fixture) and timm ViTs trained on digits, and a
merge without data; through the API and the real CLI. The parts alone are tested in tests/unit (test_select,
test_paper_matching, test_circuit, test_learned, test_scale_options)."""

import json

import pytest

from conftest import run_cli
from factories import tiny_gpt2
from glmc.matching import weight
from glmc.matching.select import midpoint_loss, training_batches
from glmc.options import WeightOptions


def _pair_and_data(gpt2_pair):
    import glmc.data
    from glmc.models import load_model

    a, b = (load_model(p)[0] for p in gpt2_pair)
    return a, b, glmc.data.load_for_model(gpt2_pair[0])


@pytest.mark.parametrize("mode", ["native", "circuit"])
def test_selection_keeps_the_candidate_with_the_lowest_midpoint_loss(gpt2_pair, mode):
    from glmc.matching.common import canonical_pair

    a, b, data = _pair_and_data(gpt2_pair)
    al = weight.align(a, b, WeightOptions(mode=mode, progress=False, select_batches=2, candidates="glmc,paper,glmc-l1"),
                      data=data)
    sel = al.report["select"]
    names = [c["name"] for c in sel["candidates"]]
    assert names == ["glmc/start1", "glmc/start2", "paper", "glmc-l1"] and sel["batches"] == 2
    losses = {c["name"]: c["midpoint_loss"] for c in sel["candidates"]}
    assert al.report["chosen"] == min(losses, key=losses.get)
    assert len(set(round(v, 6) for v in losses.values())) > 1  # the candidates differ, so the choice is real
    assert al.report["max_dlogits_b"] <= 1e-4
    # the reported loss is the midpoint's: recomputed independently from the kept transform
    adapter, arch, view_a, view_b = canonical_pair(a, b)
    canon_a = adapter.from_canonical(view_a, a)
    again = midpoint_loss(canon_a, b, adapter, arch, view_b, al.transform, training_batches(data, 2), data.task, mode)
    assert again == pytest.approx(losses[al.report["chosen"]], rel=1e-5)


def test_align_cli_reports_the_kept_candidate(gpt2_pair, tmp_path):
    a, b = gpt2_pair
    out = run_cli("align", a, b, "--select-batches", 2, "--candidates", "glmc,paper", "--out", tmp_path / "al",
                  "--no-progress")
    report = json.loads((tmp_path / "al" / "align.json").read_text())
    assert report["algorithm"] == "select" and report["select"]["split"] == "train"
    assert f"kept {report['chosen']}: the lowest midpoint loss on 2 training batches" in out
    off = run_cli("align", a, b, "--select-batches", 0, "--out", tmp_path / "off", "--no-progress")
    assert "kept" not in off
    assert json.loads((tmp_path / "off" / "align.json").read_text()).get("algorithm") != "select"


def test_align_cli_circuit_mode_runs_the_papers_algorithm(gpt2_pair, tmp_path):
    a, b = gpt2_pair
    run_cli("align", a, b, "--mode", "circuit", "--algorithm", "paper", "--out", tmp_path / "paper",
            "--no-progress")
    run_cli("align", a, b, "--mode", "circuit", "--algorithm", "glmc", "--out", tmp_path / "glmc",
            "--no-progress")
    paper = json.loads((tmp_path / "paper" / "align.json").read_text())
    ours = json.loads((tmp_path / "glmc" / "align.json").read_text())
    assert paper["algorithm"] == "paper" and "algorithm" not in ours
    steps = [s for s in paper["iterations"] if isinstance(s["step"], int)]
    assert len(steps) == 15  # the paper's fixed count: no early stop
    assert paper["max_dlogits_b"] <= 1e-4 and paper["distance_after"] < paper["distance_before"]


def test_align_cli_circuit_mode_with_data_chooses_among_candidates_in_circuit_form(gpt2_pair, tmp_path):
    """By default (the models' data is recorded beside them) circuit mode scores every candidate's midpoint in
    circuit form and keeps the lowest, the paper's alternation among them."""
    a, b = gpt2_pair
    run_cli("align", a, b, "--mode", "circuit", "--out", tmp_path / "sel", "--no-progress")
    report = json.loads((tmp_path / "sel" / "align.json").read_text())
    assert report["algorithm"] == "select" and report["mode"] == "circuit"
    scored = report["select"]["candidates"]
    assert "paper" in [c["name"] for c in scored]
    assert report["chosen"] == min(scored, key=lambda c: c["midpoint_loss"])["name"]
    assert report["max_dlogits_b"] <= 1e-4


def test_barrier_cli_in_circuit_mode(gpt2_pair, tmp_path):
    run_cli("barrier", *gpt2_pair, "--align", "none,weight", "--mode", "circuit", "--points", 3, "--max-batches", 2,
            "--json", tmp_path / "c.json", "--no-progress")
    run_cli("barrier", *gpt2_pair, "--align", "none,weight", "--points", 3, "--max-batches", 2,
            "--json", tmp_path / "n.json", "--no-progress")
    circ = json.loads((tmp_path / "c.json").read_text())["results"]
    nat = json.loads((tmp_path / "n.json").read_text())["results"]
    assert circ["weight"]["parameters"] > nat["weight"]["parameters"]
    # both forms compute the same endpoints
    for m in ("none", "weight"):
        assert circ[m]["loss_endpoints"] == pytest.approx(nat[m]["loss_endpoints"], abs=1e-4)
    assert circ["weight"]["loss_barrier"] < circ["none"]["loss_barrier"]


def test_learned_matching_returns_an_exact_symmetry(gpt2_pair):
    import glmc.data
    from glmc.matching import align
    from glmc.models import load_model

    a, _ = load_model(gpt2_pair[0])
    b, _ = load_model(gpt2_pair[1])
    ds = glmc.data.load_for_model(gpt2_pair[0])
    al = align(a, b, "learned", data=ds, steps=12, eval_every=6, eval_batches=2, iterations=3, progress=False,
               lr=3e-3)
    r = al.report
    assert r["max_dlogits_b"] <= 1e-4
    # training lowers the validation barrier of the weight-matching start (0.0103 -> 0.0061 when measured)
    assert r["best_val_barrier"] < 0.8 * r["init_val_barrier"] and r["best_step"] > 0
    assert r["steps"] == 12 and len(r["history"]) == 3 and r["seconds_per_step"] > 0


def test_a_time_budget_scores_its_last_step(gpt2_pair):
    """A `minutes` budget that runs out between validations still scores where it stopped: the steps after the
    last check are not thrown away (a budget shorter than eval_every used to return the weight-matching start)."""
    import glmc.data
    from glmc.matching import align
    from glmc.models import load_model

    a, _ = load_model(gpt2_pair[0])
    b, _ = load_model(gpt2_pair[1])
    ds = glmc.data.load_for_model(gpt2_pair[0])
    r = align(a, b, "learned", data=ds, minutes=1e-4, eval_every=50, eval_batches=2, iterations=3,
              progress=False).report
    assert 1 <= r["steps"] < 50
    assert [h["step"] for h in r["history"]] == [0, r["steps"]]


@pytest.mark.slow
def test_learned_matching_on_timm_vits_with_soft_permutations(tmp_path):
    """timm ViTs trained on digits; the soft (Sinkhorn) variant still returns an exact symmetry and reports how
    far the soft maps moved the endpoint."""
    import glmc.data
    from conftest import TINY_VIT, run_cli
    from glmc.matching import align
    from glmc.models import load_model

    for seed in (0, 1):
        run_cli("train", "vit", "--family", "timm", "--data", "digits", "--seed", seed, "--width", 32,
                "--out", tmp_path / f"t{seed}", *TINY_VIT)
    a, _ = load_model(tmp_path / "t0")
    b, _ = load_model(tmp_path / "t1")
    ds = glmc.data.load_for_model(tmp_path / "t0")
    for soft in (False, True):
        al = align(a, b, "learned", data=ds, steps=8, eval_every=4, eval_batches=2, iterations=2, progress=False,
                   soft=soft)
        assert al.report["max_dlogits_b"] <= 1e-4
        assert al.report["best_val_barrier"] < al.report["init_val_barrier"] and al.report["best_step"] > 0
        assert ("soft_endpoint_loss_change" in al.report) == soft


def test_learned_perm_learns_its_permutations_and_learned_does_not(gpt2_pair):
    import glmc.data
    from glmc.matching import align
    from glmc.matching.learned import PERMUTATIONS_ONLY_LR
    from glmc.models import load_model

    a, _ = load_model(gpt2_pair[0])
    b, _ = load_model(gpt2_pair[1])
    ds = glmc.data.load_for_model(gpt2_pair[0])
    for method, rate in (("learned", 0.0), ("learned-perm", PERMUTATIONS_ONLY_LR)):
        r = align(a, b, method, data=ds, steps=2, eval_every=2, eval_batches=1, iterations=1, progress=False).report
        assert r["perm_lr"] == rate


def test_weight_merge_without_data_or_evaluation(tmp_path):
    import json

    from conftest import run_cli
    from glmc.models import load_model, save_model

    for s in (0, 1):
        save_model(tiny_gpt2(seed=s), tmp_path / f"g{s}")  # no glmc.json: no data is known
    out = run_cli("merge", tmp_path / "g0", tmp_path / "g1", "--out", tmp_path / "m", "--no-eval", "--rounds", "1",
                  "--no-progress")
    assert "not evaluated" in out
    report = json.loads((tmp_path / "m" / "merge.json").read_text())
    assert report["scores"] == {} and max(report["max_dlogits"]) <= 1e-4
    load_model(tmp_path / "m")
