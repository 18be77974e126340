"""The public Python API (glmc.load_model, align, barrier, merge, verify, evaluate, Transform): what a
researcher in a notebook calls, checked against the parts underneath and against the CLI."""

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import glmc
from conftest import run_cli, tiny_gpt2
from glmc.adapters import adapter_for
from glmc.matching.common import max_logit_change
from glmc.symmetry.random import random_full_transform

ROOT = Path(__file__).resolve().parents[2]


def _pair():
    return tiny_gpt2(seed=0), tiny_gpt2(seed=1)


def _tokens(n=3, batch=4, length=17, vocab=97, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (batch, length), generator=g) for _ in range(n)]


def _random_transform(model, seed):
    arch = adapter_for(model).arch(model)
    return glmc.Transform(random_full_transform(arch, torch.Generator().manual_seed(seed)), dict(arch.groups))


def test_every_public_name_is_documented():
    for name in glmc.__all__:
        if name.startswith("__"):
            continue
        obj = getattr(glmc, name)
        assert inspect.getdoc(obj) and len(inspect.getdoc(obj)) > 40, name


def test_align_docstring_names_every_option_of_every_method():
    from glmc.matching import _accepted
    from glmc.methods import methods

    doc = inspect.getdoc(glmc.align)
    for record in methods().values():
        method, func = record.name, record.function()
        for option in (_accepted(func) if func else []):
            if option in ("data", "fill", "learn_free", "permutations_only"):  # set by glmc.align itself
                continue
            assert f"{option}=" in doc, (method, option)


def test_misspelt_option_raises_and_lists_the_valid_ones():
    a, b = _pair()
    with pytest.raises(TypeError, match="iteration.*iterations"):
        glmc.align(a, b, "weight", iteration=3)
    with pytest.raises(glmc.api.functions.BadOption, match="unknown alignment method"):
        glmc.align(a, b, "wieght")


def test_align_returns_a_checked_native_model_and_a_reusable_transform(tmp_path):
    a, b = _pair()
    before = {k: v.clone() for k, v in b.state_dict().items()}
    al = glmc.align(a, b, "weight", iterations=3, progress=False)
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in before.items())  # input untouched
    assert type(al.model_b) is type(b)
    assert max_logit_change(b, al.model_b) <= 1e-4
    assert al.report["distance_after"] < al.report["distance_before"]
    # the transform, applied by itself, gives the same aligned model
    assert max_logit_change(al.model_b, al.transform.apply(b)) <= 1e-6
    al.save(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "align.json").read_text())["method"] == "weight"
    reloaded = glmc.load_model(tmp_path / "out")
    assert max_logit_change(b, reloaded) <= 1e-4
    t = glmc.Transform.load(tmp_path / "out" / "transform.safetensors")
    assert t.groups == al.transform.groups
    assert max_logit_change(al.model_b, t.apply(b)) <= 1e-6


def test_transform_inverse_and_composition_order():
    m = tiny_gpt2(seed=2)
    t, u = _random_transform(m, 1), _random_transform(m, 2)
    assert max_logit_change(m, t.apply(m)) <= 1e-4
    assert max_logit_change(m, t.inverse().apply(t.apply(m))) <= 1e-4
    # the inverse restores the canonical weights, not only the function
    from glmc.view.model_ops import canonical_model

    back, canon = t.inverse().apply(t.apply(m)).state_dict(), canonical_model(m).state_dict()
    assert max(float((back[k] - canon[k]).abs().max()) for k in canon) < 1e-4
    # compose is function composition: t ∘ u applies u first
    tu, ut = t.compose(u).apply(m).state_dict(), t.apply(u.apply(m)).state_dict()
    assert max(float((tu[k] - ut[k]).abs().max()) for k in tu) < 1e-4
    other = u.apply(t.apply(m)).state_dict()
    assert max(float((tu[k] - other[k]).abs().max()) for k in tu) > 1e-2  # the order matters
    assert max(float((t.then(u).apply(m).state_dict()[k] - other[k]).abs().max()) for k in other) < 1e-4


def test_transform_refuses_another_architecture(tmp_path):
    t = _random_transform(tiny_gpt2(seed=0), 1)
    with pytest.raises(glmc.api.transform.IncompatibleModels, match="another architecture"):
        t.apply(tiny_gpt2(n_embd=48, seed=0))
    t.save(tmp_path / "t.safetensors")
    assert glmc.Transform.load(tmp_path / "t.safetensors").groups == t.groups
    (tmp_path / "bad.safetensors").write_bytes(b"not a transform")
    with pytest.raises(glmc.api.transform.BadCheckpoint):
        glmc.Transform.load(tmp_path / "bad.safetensors")


def test_data_may_be_a_dataloader_tensors_or_hf_dicts():
    from torch.utils.data import DataLoader, TensorDataset

    a, b = _pair()
    tokens = _tokens()
    ref = glmc.barrier(a, b, data=tokens, points=3, progress=False)
    loader = DataLoader(TensorDataset(torch.cat(tokens)), batch_size=4,
                        collate_fn=lambda rows: torch.stack([r[0] for r in rows]))
    assert glmc.barrier(a, b, data=loader, points=3, progress=False).loss == ref.loss
    hf = [{"input_ids": t, "labels": t} for t in tokens]
    assert glmc.barrier(a, b, data=hf, points=3, progress=False).loss == ref.loss
    gen = (t for t in tokens)  # a one-shot generator is read once and kept
    assert glmc.barrier(a, b, data=gen, points=3, progress=False).loss == ref.loss
    # -100 labels (padding, prompts) are left out of loss and accuracy
    masked = [{"input_ids": t, "labels": torch.where(torch.arange(t.shape[1]) < 9, -100, t)} for t in tokens]
    e_all, e_masked = glmc.evaluate(a, hf), glmc.evaluate(a, masked)
    assert e_masked["n"] == e_all["n"] // 2 and e_masked["loss"] != e_all["loss"]


def test_bad_batches_are_one_line_errors():
    a = tiny_gpt2(seed=0)
    with pytest.raises(glmc.api.data.BadData, match="token batch"):
        glmc.evaluate(a, [["not", "tokens"]])
    with pytest.raises(glmc.api.data.BadData, match="empty"):
        glmc.evaluate(a, {"test": []})
    with pytest.raises(glmc.api.data.BadData, match="needs data"):
        glmc.align(a, tiny_gpt2(seed=1), "activation")


def test_curve_metrics_plot_and_json(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from glmc.paths.barrier import barrier_metrics

    a, b = _pair()
    c = glmc.barrier(a, b, data=_tokens(), points=5, align="weight", iterations=2, progress=False)
    m = barrier_metrics({"lambdas": c.lambdas, "loss": c.loss, "acc": c.accuracy})
    assert c.barrier == m["loss_barrier"] and c.barrier_mean == m["loss_barrier_mean"]
    assert c.alignment is not None and c.alignment.method == "weight"
    ax = c.plot()
    assert len(ax.lines) == 1 and list(ax.lines[0].get_xdata()) == c.lambdas
    d = json.loads(c.to_json(tmp_path / "c.json"))
    assert d["loss"] == c.loss and json.loads((tmp_path / "c.json").read_text())["loss_barrier"] == c.barrier


def test_merge_and_simplex_of_three():
    models = [tiny_gpt2(seed=s) for s in range(3)]
    m = glmc.merge(models, "weight", iterations=2, rounds=1, progress=False)
    assert len(m.aligned) == 3 and all(max_logit_change(x, y) <= 1e-4 for x, y in zip(models, m.aligned))
    assert type(m.model) is type(models[0])
    s = glmc.barrier(models, data=_tokens(), resolution=2, progress=False)
    assert len(s.points) == 6 and s.barrier == max(s.metrics["excess"])


def test_verify_reports_every_class():
    v = glmc.verify(tiny_gpt2(seed=0))
    assert {"residual", "heads", "qk", "ov", "mlp"} <= set(v) and v.ok and max(v.values()) <= 1e-4


def test_load_model_names_the_problem(tmp_path):
    with pytest.raises(glmc.api.functions.BadCheckpoint, match="neither a directory nor"):
        glmc.load_model("someone/not-cached-model")
    with pytest.raises(glmc.api.functions.BadCheckpoint):
        glmc.load_model(tmp_path)


def test_import_glmc_does_not_import_torch():
    code = "import sys, glmc; assert 'torch' not in sys.modules; glmc.align; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------------------------ trained
def test_api_and_cli_give_identical_barriers(gpt2_pair, tmp_path):
    a_dir, b_dir = gpt2_pair
    run_cli("barrier", a_dir, b_dir, "--align", "none,weight", "--max-batches", 4, "--iterations", 3,
            "--json", tmp_path / "b.json", "--no-progress")
    cli = json.loads((tmp_path / "b.json").read_text())["results"]
    a, b = glmc.load_model(a_dir), glmc.load_model(b_dir)
    for method in ("none", "weight"):
        curve = glmc.barrier(a, b, align=method, max_batches=4, iterations=3, progress=False)
        assert curve.loss == cli[method]["loss"] and curve.barrier == cli[method]["loss_barrier"]


def test_examples_run(gpt2_pair, vit_models, tmp_path):
    a_dir, b_dir = gpt2_pair
    out = subprocess.run([sys.executable, ROOT / "examples" / "align_and_plot.py", a_dir, b_dir, "--out",
                          tmp_path / "b.png", "--max-batches", "2"], capture_output=True, text=True, check=True)
    assert "weight: barrier" in out.stdout and (tmp_path / "b.png").stat().st_size > 1000
    three = [vit_models[k] for k in ("w64s0", "w64s1", "w64s2")]
    out = subprocess.run([sys.executable, ROOT / "examples" / "merge_three.py", *three, "--out", tmp_path / "m",
                          "--max-batches", "2"], capture_output=True, text=True, check=True)
    assert "simplex barrier" in out.stdout and (tmp_path / "m" / "aligned" / "model3").is_dir()
    assert glmc.load_model(tmp_path / "m") is not None


def test_merge_recipe(vit_models, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    models = [str(vit_models[k]) for k in ("w64s0", "w64s1", "w32s3")]
    recipe.write_text("models:\n" + "".join(f"  - {m}\n" for m in models) +
                      "method: weight\nweights: [0.5, 0.25, 0.25]\noptions: {rounds: 2, iterations: 2}\n"
                      "evaluation: {max_batches: 2}\noutput: merged\n")
    out = run_cli("merge", "--config", recipe, "--no-progress")
    report = json.loads((tmp_path / "merged" / "merge.json").read_text())
    assert report["weights"] == [0.5, 0.25, 0.25] and report["recipe"] == str(recipe) and "merged:" in out


def test_load_model_finds_a_hub_id_in_the_local_cache(tmp_path):
    # the layout huggingface_hub keeps: models--org--name/{refs/main, snapshots/<revision>/<files>}
    repo = tmp_path / "hub" / "models--someone--tiny-gpt2"
    snap = repo / "snapshots" / ("0" * 40)
    tiny_gpt2(seed=3).save_pretrained(snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    m = glmc.load_model("someone/tiny-gpt2", cache_dir=tmp_path / "hub")
    assert max_logit_change(tiny_gpt2(seed=3), m) == 0.0
    with pytest.raises(glmc.api.functions.BadCheckpoint, match="hf download someone/other"):
        glmc.load_model("someone/other", cache_dir=tmp_path / "hub")
