"""Research workflows (docs/workflows.md): the barrier decomposition, standard errors over batches and seeds, and
`glmc train --save-every`; through the API and the real CLI."""

import json

import pytest
import torch

import glmc
from conftest import run_cli
from factories import tiny_gpt2
from glmc.models import load_model
from glmc.paths.decompose import PartialInterpolation, canonical_views
from glmc.symmetry.parts import ROLES, groupings, part_of


def _tokens(n=3, batch=4, length=17, vocab=97, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (batch, length), generator=g) for _ in range(n)]


def _batches(n=3):
    return [{"input_ids": t[:, :-1], "targets": t[:, 1:]} for t in _tokens(n)]


# ---------------------------------------------------------------------------------------------- parts

def test_parts_partition_keys_including_undeclared_ones():
    keys = ["embed", "pos_embed", "blocks.0.ln1.w", "blocks.0.attn.q.w", "blocks.0.attn.k.b", "blocks.0.attn.v.w",
            "blocks.0.attn.o.b", "blocks.0.mlp.gate.w", "blocks.0.mlp.out.w", "blocks.0.attn.q_norm.w",
            "blocks.1.post_ln2.w", "blocks.1.attn.sink", "embed_ln.b", "token_type_embed", "ln_final.w", "head.w"]
    assert part_of("blocks.0.attn.q_norm.w") == ("qk", 0)
    assert part_of("blocks.1.post_ln2.w") == ("norms", 1)  # a family's extra norm, by the rule
    assert part_of("blocks.1.attn.sink") == ("other", 1)  # undeclared and not norm-like: its own role
    assert part_of("embed_ln.b") == ("norms", None) and part_of("token_type_embed") == ("embed_head", None)
    assert part_of("blocks.1.attn.sink", {"blocks.{i}.attn.sink": "qk"}) == ("qk", 1)  # a family's declaration wins
    for grouping, parts in groupings(keys).items():
        flat = [k for ks in parts.values() for k in ks]
        assert sorted(flat) == sorted(keys), grouping
    assert list(groupings(keys)["roles"]) == [r for r in ROLES if r in groupings(keys)["roles"]]


# ---------------------------------------------------------------------------------------------- decomposition

def test_all_parts_reproduce_the_curve_and_a_missing_part_does_not():
    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    curve = glmc.barrier(a, b, data=_tokens(), points=5, align="weight", iterations=2, progress=False)
    d = curve.decompose()
    assert d.lambdas == curve.lambdas
    assert d.whole["loss"] == curve.loss  # aligned endpoints are canonical already: the very curve measured
    assert d.all_parts_max_abs_diff == 0.0
    assert set(d.parts) == {"roles", "layers", "cells"}
    assert {p["role"] for p in d.parts["roles"].values()} == {"embed_head", "qk", "ov", "mlp", "norms"}
    assert set(d.parts["layers"]) == {"outside", "layer 0", "layer 1"}
    for grouping in d.parts.values():  # every variant starts at A
        for p in grouping.values():
            assert p["only"]["loss"][0] == p["all_but"]["loss"][0] == curve.loss[0]
    # a part that changes nothing (GPT-2's block norms: gains 1, biases folded into their readers)
    trivial = d.parts["cells"]["norms@0"]
    la, lb = curve.loss[0], curve.loss[-1]
    assert trivial["only"]["loss"] == [la] * 5 and trivial["only"]["barrier"] == 0.0
    assert trivial["only"]["peak_excess"] == pytest.approx(max(0.0, la - lb), abs=1e-12)
    assert trivial["all_but"]["loss"] == curve.loss
    assert trivial["all_but"]["barrier"] == trivial["all_but"]["peak_excess"] == d.whole["barrier"] == curve.barrier
    # the check can fail: leave one key out of "all parts" and the path is no longer the whole one
    adapter, views, ends = canonical_views(curve.alignment.model_a, curve.alignment.model_b)
    interp = PartialInterpolation(adapter, views, ends[0])
    from glmc.paths.barrier import evaluate_batches

    batches = curve.batches
    without = set(views[0]) - {"blocks.1.mlp.in.w"}
    assert evaluate_batches(interp.set(0.5, without), batches, "lm")["loss"] != curve.loss[2]
    assert evaluate_batches(interp.set(0.5, set(views[0])), batches, "lm")["loss"] == curve.loss[2]
    # the result object: JSON, table, heat map
    data = json.loads(curve.to_json())
    assert data["decomposition"]["parts"]["cells"]["mlp@1"]["only"]["peak_excess"] == \
        d.parts["cells"]["mlp@1"]["only"]["peak_excess"]
    assert "attention QK" in d.table() and "layer 1" in d.table()
    labels, roles, matrix = d.heatmap()
    assert labels == ["layer 0", "layer 1", "outside"] and roles == ["embed_head", "qk", "ov", "mlp", "norms"]
    assert matrix[2][2] is None and matrix[0][3] == d.parts["cells"]["mlp@0"]["only"]["peak_excess"]
    fig = d.plot()
    assert len(fig.axes) == 4  # two heat maps and their colour bars


def test_decomposing_the_raw_pair_folds_the_gains_first():
    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    curve = glmc.barrier(a, b, data=_tokens(), points=3, progress=False)
    d = curve.decompose(by=("roles",), points=3)
    assert d.all_parts_max_abs_diff == 0.0 and set(d.parts) == {"roles"}
    # same endpoints' function (a canonical view), another path: the raw one interpolates the gains themselves
    assert d.whole["loss"][0] == pytest.approx(curve.loss[0], abs=1e-5)
    assert d.whole["loss"][1] != curve.loss[1]


# ---------------------------------------------------------------------------------------------- uncertainty

def test_standard_errors_are_the_batch_level_ones():
    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    batches = _batches(4)
    curve = glmc.barrier(a, b, batches=batches, points=3, progress=False)
    m = curve.metrics
    assert curve.info["n_predictions"] == 4 * 4 * 16 and curve.info["unit"] == "tokens"
    assert m["n_batches"] == 4
    # independently: each batch's loss at the midpoint and the ends, from glmc.evaluate on averaged models
    from glmc.paths.interpolate import Interpolation

    interp = Interpolation([a, b])
    per = [[glmc.evaluate(interp.set(t), [bt])["loss"] for bt in batches] for t in (0.0, 0.5, 1.0)]
    i = curve.lambdas.index(m["loss_barrier_lambda"])
    t = curve.lambdas[i]
    e = torch.tensor([x - ((1 - t) * x0 + t * x1) for x, x0, x1 in zip(per[i], per[0], per[2])], dtype=torch.float64)
    assert m["loss_barrier_se"] == pytest.approx(float(e.std() / 2), rel=1e-4)  # equal batches: sd/√B
    mid = torch.tensor(per[1], dtype=torch.float64)
    assert m["loss_se"][1] == pytest.approx(float(mid.std() / 2), rel=1e-4)
    one = glmc.barrier(a, b, batches=batches[:1], points=3, progress=False).metrics
    assert one["loss_barrier_se"] is None  # one batch: no standard error
    data = json.loads(curve.to_json())
    assert data["loss_barrier_se"] == m["loss_barrier_se"] and len(data["per_batch"]["n"]) == 4


def test_seeds_repeat_stochastic_methods_only():
    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    kw = dict(data=_tokens(), points=3, progress=False, seeds=[0, 1])
    learned = glmc.barrier(a, b, align="learned", steps=2, batch_size=4, iterations=1, eval_every=50, **kw)
    assert [r["seed"] for r in learned.info["repeats"]] == [0, 1]
    s = learned.info["over_seeds"]["loss_barrier"]
    values = [r["loss_barrier"] for r in learned.info["repeats"]]
    assert s["n"] == 2 and s["mean"] == pytest.approx(sum(values) / 2)
    assert s["se"] == pytest.approx(abs(values[0] - values[1]) / 2)
    weight = glmc.barrier(a, b, align="weight", iterations=1, **kw)
    assert weight.info["repeats"] == "deterministic"


# ---------------------------------------------------------------------------------------------- CLI and save-every

def test_save_every_keeps_loadable_checkpoints(runs):
    s0 = runs[0]
    steps = sorted(int(p.name[4:]) for p in (s0 / "checkpoints").iterdir())
    assert steps == [0, 3, 6]
    final, record = load_model(s0)
    last, rec = load_model(s0 / "checkpoints" / "step6")
    assert rec["kind"] == "training-checkpoint" and rec["training"]["step"] == 6 and rec["data"] == record["data"]
    if record["training"]["best_step"] == 6:  # the best validated weights are the last ones: the same tensors
        assert all(torch.equal(x, y) for x, y in zip(final.state_dict().values(), last.state_dict().values()))
    first, _ = load_model(s0 / "checkpoints" / "step0")
    assert not torch.equal(first.state_dict()["lm_head.weight"], last.state_dict()["lm_head.weight"])
    assert not list(s0.parent.glob(".*checkpoints*"))  # no staging directory left behind


def test_barrier_cli_decomposes_and_reports_standard_errors(runs, tmp_path):
    out = run_cli("barrier", *runs, "--align", "none,weight", "--points", 3, "--max-batches", 3, "--batch-size", 8,
                  "--decompose", "--decompose-points", 3, "--decompose-plot", tmp_path / "d.png", "--plot",
                  tmp_path / "c.png", "--json", tmp_path / "b.json", "--seeds", "0,1", "--no-progress")
    res = json.loads((tmp_path / "b.json").read_text())
    for method in ("none", "weight"):
        r = res["results"][method]
        assert r["decomposition"]["all_parts_max_abs_diff"] == 0.0
        assert r["loss_barrier_se"] is not None and r["n_predictions"] == 3 * 8 * 32 and r["unit"] == "tokens"
        assert r["repeats"] == "deterministic"
    assert res["results"]["weight"]["decomposition"]["whole"]["loss"] == res["results"]["weight"]["loss"]
    assert "± se: standard error over 3 evaluation batches (768 tokens)" in out
    assert "decomposition, weight:" in out and "attention OV" in out
    assert (tmp_path / "d.png").stat().st_size > 20_000 and (tmp_path / "c.png").stat().st_size > 10_000


def test_decompose_refuses_what_it_cannot_do(runs, tmp_path):
    from click.testing import CliRunner

    from glmc.cli import main

    r = CliRunner().invoke(main, ["barrier", *map(str, runs), "--decompose", "--mode", "circuit"])
    assert r.exit_code == 2 and "--decompose works on two models in native mode" in r.output
    r = CliRunner().invoke(main, ["barrier", *map(str, runs), "--decompose-plot", str(tmp_path / "x.png")])
    assert r.exit_code == 2 and "needs --decompose" in r.output
    r = CliRunner().invoke(main, ["barrier", *map(str, runs), "--seeds", "a,b"])
    assert r.exit_code == 2 and "comma-separated list of integers" in r.output


# ---------------------------------------------------------------------------------------------- sweeps

def test_sweep_grids():
    from glmc.experiments.sweep import seed_cells, step_cells

    models = ["r/a", "r/b", "r/c", "r/d"]
    assert len(seed_cells(models, ["none", "weight"])) == 6 * 2
    ref = seed_cells(models, ["none"], reference=True)
    assert [(c.a_index, c.b_index) for c in ref] == [(0, 1), (0, 2), (0, 3)] and ref[0].pair == "a~b"
    cells = step_cells({"step0": ("x/s0/checkpoints/step0", "x/s1/checkpoints/step0")}, ["weight"])
    assert cells[0].pair == "s0~s1" and cells[0].name == "s0~s1__step0__weight"


def test_sweep_refuses_bad_grids(runs, tmp_path):
    from click.testing import CliRunner

    from glmc.cli import main

    def fails(*args):
        r = CliRunner().invoke(main, ["sweep", "-o", str(tmp_path / "sw"), *map(str, args)])
        assert r.exit_code != 0
        return r.output

    assert "is not STEP=DIR_A:DIR_B" in fails("--at", "step0")
    assert "give at least two models" in fails(runs[0])
    assert "share no checkpoints/stepN" in fails("--checkpoints", runs[0] / "checkpoints", runs[1])
    assert "one of --checkpoints, --revisions and --at" in fails("--checkpoints", *runs, "--at", "x=a:b")
    out = fails("--revisions", "step0", "nobody/none-such", "nobody/other")
    assert "local Hugging Face cache" in out and "Traceback" not in out


@pytest.mark.slow
def test_checkpoint_sweep_resumes_after_a_kill_without_recomputing(runs, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "sw"
    args = ["sweep", "--checkpoints", *map(str, runs), "--align", "none", "--points", "3", "--max-batches", "2",
            "--batch-size", "8", "-o", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "glmc.cli", *args], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while time.time() < deadline and not list((out / "cells").glob("[!.]*.json")):
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its running cell, mid-run
    proc.wait()
    finished = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (out / "cells").glob("[!.]*.json")}
    assert 1 <= len(finished) < 3
    assert not (out / "sweep.csv").exists()
    log = run_cli(*args)
    assert f"{len(finished)} already finished (kept)" in log
    for name, stamp in finished.items():
        p = out / "cells" / name
        assert (p.stat().st_ino, p.stat().st_mtime_ns) == stamp  # not recomputed
    import csv

    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert [(r["step"], r["status"]) for r in rows] == [("step0", "ok"), ("step3", "ok"), ("step6", "ok")]
    assert all(float(r["peak_rss_mb"]) > 50 and r["unit"] == "tokens" and r["n_predictions"] == "512" for r in rows)
    assert float(rows[0]["loss_barrier_se"]) >= 0
    import pyarrow.parquet as pq  # a dependency of glmc: its absence is a failure, not a skip
    table = pq.read_table(out / "sweep.parquet").to_pylist()
    assert [r["loss_barrier"] for r in table] == [float(r["loss_barrier"]) for r in rows]
    assert (out / "sweep-steps.png").stat().st_size > 10_000


@pytest.mark.slow
def test_seed_sweep_with_jobs_draws_the_matrix(runs, tmp_path):
    models = [runs[0], runs[1], runs[0] / "checkpoints" / "step3"]
    out = tmp_path / "sw"
    log = run_cli("sweep", *models, "--align", "none", "--points", 3, "--max-batches", 2, "--batch-size", 8,
                  "--jobs", 2, "-o", out)
    assert "3 to run on local" in log
    data = json.loads((out / "sweep.json").read_text())
    assert data["schema"] == "glmc.sweep/1" and data["kind"] == "seeds" and len(data["rows"]) == 3
    assert {r["pair"] for r in data["rows"]} == {"s0~s1", "s0~step3", "s1~step3"}
    assert (out / "sweep-matrix.png").stat().st_size > 10_000


def test_decompose_by_chooses_the_groupings(runs, tmp_path):
    run_cli("barrier", *runs, "--align", "weight", "--points", 3, "--max-batches", 2, "--batch-size", 8,
            "--decompose", "--decompose-points", 3, "--decompose-by", "roles", "--json", tmp_path / "b.json",
            "--no-progress")
    d = json.loads((tmp_path / "b.json").read_text())["results"]["weight"]["decomposition"]
    assert set(d["parts"]) == {"roles"} and d["all_parts_max_abs_diff"] == 0.0
    out = run_cli("report", tmp_path / "b.json", "-o", tmp_path / "r.html")
    assert "1 figures" in out  # the curves; no heat map without cells


def test_sweep_revisions_resolve_in_a_local_cache(tmp_path, monkeypatch):
    from conftest import make_cache
    from glmc.errors import BadCheckpoint
    from glmc.models.hub import snapshot as resolve_revision

    saved = {}
    for name in ("step0", "step1000"):
        saved[name] = tmp_path / "src" / name
        tiny_gpt2(seed=len(saved)).save_pretrained(saved[name])
    cache = make_cache(tmp_path / "hub", "org/run-seed1", saved)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    got = resolve_revision("org/run-seed1", "step1000")
    assert got.is_dir() and (got / "config.json").read_bytes() == (saved["step1000"] / "config.json").read_bytes()
    assert resolve_revision("org/run-seed1", "step0") != got
    with pytest.raises(BadCheckpoint, match="hf download org/run-seed1 --revision step9"):
        resolve_revision("org/run-seed1", "step9")
