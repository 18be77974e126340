"""The conformance suite every adapter inherits (issue #16, item 3; the pattern of SliceGPT's adapter test base).

A family plugs in with one file, tests/conformance/test_conformance_<family>.py, and its builder in
tests/factories.py:

    class TestMyFamilyConformance(AdapterConformance):
        family = "my-family"                      # the adapter's `family` (glmc.adapters.ADAPTERS)
        configs = {"name": seeded(my_family, width=24, ...), ...}  # factory(seed) -> small random model, eval mode
        xfail = {("test_name", "config"): "why"}  # optional: known bugs, strict xfail of single cases
        declared_checks = {"heads", "qk", ...}    # optional: classes verify must check on every config

Every `test_*` method below that takes the `config` argument runs once per entry of `configs` (parametrised by
`pytest_generate_tests`, which pytest calls on the class); the others run once per family. A factory must
perturb norms and LayerScale away from their identity init and give the weights a realistic scale (logits of a
few units), otherwise folding and float32 error go untested; `test_factory_builds_a_perturbed_model` checks it.
test_conformance_registry.py fails when an adapter in glmc.adapters.ADAPTERS has no subclass with at least 3
configs. Nothing here trains; keep every model tiny (width ≤ 32, ≤ 2 layers, ≤ 8×8 images).
"""

from __future__ import annotations

import pytest
import torch

from conftest import run_cli
from glmc.adapters import UnsupportedModel, adapter_for, batch_of, canonical_shapes, forward
from glmc.invariance import probe_inputs, verify_model
from glmc.matching.alternation import weight_matching
from glmc.matching.common import residual_keys, view_distance
from glmc.matching.residual_fit import ResidualPass, streamed_distance
from glmc.models import load_model, save_model
from glmc.symmetry.kinds import kind
from glmc.symmetry.random import exact_classes, random_class_element, random_full_transform, resolve
from glmc.symmetry.spec import group_name, instantiate
from glmc.symmetry.transform import Transform
from glmc.view.canonical import canonicalise, is_canonical
from glmc.view.model_ops import canonical_model, logits, transform_model

TOL = 1e-4  # function preservation (max |Δlogits|, |Δloss|) and weight restoration
MATCH_TOL = 1e-6  # relative weight distance after weight matching recovers a planted symmetry
NORM_GAINS = ("ln1.w", "ln2.w", "ln_final.w", "ls1", "ls2")  # canonical keys a factory must move off identity
# canonical keys no symmetry group acts on: norm gains and LayerScale (folded), output biases (class or vocabulary
# space; an MLM head's own bias parameter, head.b0),
# timm's per-head q_norm / k_norm (shared by all heads, so head permutations leave them alone)
UNTOUCHED = NORM_GAINS + ("head.b", "head.b0", "q_norm.w", "q_norm.b", "k_norm.w", "k_norm.b")


# ---------------------------------------------------------------------------------------------- helpers

def max_diff(a, b, x) -> float:
    return float((logits(a, x) - logits(b, x)).abs().max())


def state_diff(a, b, exact: bool = True, atol: float = TOL) -> list[str]:
    """Keys whose tensors differ between two models' state dicts (a key on one side only counts as differing)."""
    sa, sb = a.state_dict(), b.state_dict()
    bad = sorted(set(sa) ^ set(sb))
    for k in sorted(set(sa) & set(sb)):
        x, y = sa[k], sb[k]
        same = (torch.equal(x, y) if exact else
                x.shape == y.shape and torch.allclose(x.double(), y.double(), rtol=0, atol=atol))
        if not same:
            bad.append(k)
    return bad


def view_diff(a: dict, b: dict, atol: float = TOL) -> list[str]:
    """Keys whose tensors differ (beyond `atol`) between two canonical views."""
    bad = sorted(set(a) ^ set(b))
    return bad + [k for k in sorted(set(a) & set(b)) if a[k].shape != b[k].shape
                  or not torch.allclose(a[k].double(), b[k].double(), rtol=0, atol=atol)]


def shared_storage(model) -> set[frozenset[str]]:
    """The groups of state-dict keys that share one tensor (a tied head and embedding)."""
    by_ptr: dict[int, set] = {}
    for k, t in model.state_dict(keep_vars=True).items():
        by_ptr.setdefault(t.data_ptr(), set()).add(k)
    return {frozenset(keys) for keys in by_ptr.values() if len(keys) > 1}


def expected_checks(arch) -> set[str]:
    """What verify_model must report for this model: nothing more, nothing less."""
    names = {"canonical", "composed", "composed∘inverse", *exact_classes(arch)}
    if "rectangular" not in arch.unsupported:
        names.add("rectangular")
    return names


def is_invertible_class(cls: str, arch) -> bool:
    role, k = resolve(cls)
    return kind(k or arch.groups[role].kind).invertible


# ---------------------------------------------------------------------------------------------- the suite

class AdapterConformance:
    """Base class of every family's conformance tests; not collected itself (its name does not start with Test)."""

    family: str = ""
    configs: dict = {}  # name -> factory(seed) returning a small random model in eval mode
    xfail: dict = {}  # (test method name, config name) -> reason: a known bug, marked xfail(strict=True)
    min_configs = 3
    # checks verify must report on every config: the family's known groups, so a declaration that silently loses
    # one fails here (everything else compares verify against the arch's own declarations)
    declared_checks: set = set()
    circuit_configs: set = set()  # configs the paper's circuit form must express (refused: the test fails)

    def pytest_generate_tests(self, metafunc):
        if "config" not in metafunc.fixturenames:
            return
        test = metafunc.function.__name__
        params = [pytest.param(name, id=name, marks=[pytest.mark.xfail(strict=True, reason=self.xfail[test, name])]
                               if (test, name) in self.xfail else [])
                  for name in self.configs]
        metafunc.parametrize("config", params)

    @pytest.fixture(autouse=True)
    def _one_thread(self):
        """Tiny tensors: intra-op threads only add overhead (5× slower on 2 shared cores); restored after."""
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(n)

    # --- building blocks ------------------------------------------------------------------------------------

    def make(self, config: str, seed: int = 0):
        return self.configs[config](seed)

    def parts(self, config: str, seed: int = 0):
        model = self.make(config, seed)
        adapter = adapter_for(model)
        return model, adapter, adapter.arch(model)

    def batch(self, model, adapter, arch, gen: torch.Generator) -> dict:
        """A batch of probe inputs with random targets of the family's task (the target key from the registry)."""
        from glmc.tasks import task as get_task

        x = probe_inputs(model, n=4, seq=8)
        classes = logits(model, x).shape[-1]
        task = get_task(arch.task)
        target = torch.randint(0, classes, x.shape[:2] if task.per_position else x.shape[:1], generator=gen)
        return {**batch_of(adapter, x), task.target_key: target}

    # --- once per family ------------------------------------------------------------------------------------

    def test_family_has_enough_configs(self):
        assert self.family, "a conformance subclass must set `family`"
        assert len(self.configs) >= self.min_configs, f"{self.family}: {len(self.configs)} configs"
        unknown = {c for _, c in self.xfail} - set(self.configs)
        assert not unknown, f"xfail names unknown configs {unknown}"

    def test_configs_cover_activations_and_head_shapes(self):
        archs = [adapter_for(m).arch(m) for m in (self.make(c) for c in self.configs)]
        assert any(a.relu for a in archs) and any(not a.relu for a in archs), "need ReLU and non-ReLU configs"
        assert len({(a.n_head, a.d_head) for a in archs}) >= 2, "need at least two head counts / sizes"

    def test_align_recovers_a_planted_symmetry_and_the_matched_path_is_flat(self):
        """glmc.align (the public API, weight matching) on A and a transformed copy of A: the distance vanishes, the
        straight path between the aligned models has no barrier and the endpoints keep their losses. Once per family,
        on its first config."""
        from glmc.matching import align
        from glmc.paths.barrier import barrier_metrics, path_curve

        model, adapter, arch = self.parts(next(iter(self.configs)))
        gen = torch.Generator().manual_seed(3)
        moved = transform_model(model, random_full_transform(arch, gen))
        found = align(model, moved, "weight", iterations=5, progress=False)
        assert found.report["distance_before"] > 0.1
        assert found.report["distance_after"] < 1e-8, found.report["iterations"]
        batches = [self.batch(model, adapter, arch, gen)]
        plain = barrier_metrics(path_curve([model, moved], batches, arch.task, 5, progress=False))
        matched = barrier_metrics(path_curve([found.model_a, found.model_b], batches, arch.task, 5, progress=False))
        assert matched["loss_barrier"] <= TOL and matched["acc_drop"] <= 1e-9
        assert max(abs(a - b) for a, b in zip(plain["loss_endpoints"], matched["loss_endpoints"])) <= TOL

    # --- once per config ------------------------------------------------------------------------------------

    def test_factory_builds_a_perturbed_model(self, config):
        model, adapter, arch = self.parts(config)
        assert adapter.family == self.family == arch.family
        assert not model.training, "factories must return models in eval mode"
        # the same seed gives the same model, another seed another one
        assert not state_diff(model, self.make(config, 0))
        assert state_diff(model, self.make(config, 1))
        view = adapter.to_canonical(model)
        gains = [k for k in view if k.endswith(NORM_GAINS)]
        assert gains, "no norm gains in the view"
        flat = [k for k in gains if torch.all(view[k] == 1)]
        assert not flat, f"norm gains / LayerScale left at identity (folding untested): {flat}"
        # the view's shapes are the ones the arch declares
        assert view["blocks.0.attn.q.w"].shape == (arch.n_head, arch.d_head, arch.d_model)
        assert view["blocks.0.mlp.in.w"].shape == (arch.d_mlp, arch.d_model)
        assert f"blocks.{arch.n_layer - 1}.ln1.w" in view and f"blocks.{arch.n_layer}.ln1.w" not in view
        assert arch.d_model <= 32 and arch.n_layer <= 2, "keep conformance models tiny"
        out = logits(model, probe_inputs(model))
        assert torch.isfinite(out).all() and 0.3 < float(out.abs().max()) < 1e3  # realistic, non-trivial logits

    def test_round_trip_is_bit_exact(self, config):
        model, adapter, _ = self.parts(config)
        view = adapter.to_canonical(model)
        rebuilt = adapter.from_canonical(view, model)
        assert type(rebuilt) is type(model)
        assert not state_diff(model, rebuilt)
        assert adapter.is_tied(rebuilt) == adapter.is_tied(model)
        assert shared_storage(rebuilt) == shared_storage(model)
        assert not rebuilt.training
        x = probe_inputs(model)
        assert max_diff(model, rebuilt, x) == 0.0
        # the view shares no memory with the model, and rebuilding leaves the view untouched
        again = adapter.to_canonical(model)
        assert view.keys() == again.keys() and all(torch.equal(view[k], again[k]) for k in view)
        ptrs = {t.data_ptr() for t in model.state_dict().values()}
        assert not any(t.data_ptr() in ptrs for t in view.values())

    def test_rebuilt_model_owns_its_weights(self, config):
        # from_canonical assigns tensors instead of copying them; none may alias the view, or writing into the
        # model in place (interpolation does) would write into the view
        model, adapter, _ = self.parts(config)
        view = adapter.to_canonical(model)
        before = {k: v.clone() for k, v in view.items()}
        rebuilt = adapter.from_canonical(view, model)
        storages = {v.untyped_storage().data_ptr() for v in view.values()}
        assert not any(p.untyped_storage().data_ptr() in storages for p in rebuilt.state_dict().values())
        assert not any(b.device.type == "meta" for b in rebuilt.buffers())
        with torch.no_grad():
            for p in rebuilt.parameters():
                p.add_(1.0)
        assert all(torch.equal(view[k], before[k]) for k in view)

    def test_consuming_rebuild_gives_the_same_model_and_empties_the_view(self, config):
        # finish() rebuilds with consume=True so a rebuild holds one model-sized copy, not two
        model, adapter, _ = self.parts(config)
        view = adapter.to_canonical(model)
        plain = adapter.from_canonical(dict(view), model)
        consumed = adapter.from_canonical(view, model, consume=True)
        assert view == {}
        assert state_diff(plain, consumed) == []
        assert max_diff(plain, consumed, probe_inputs(model)) == 0.0

    def test_canonical_shapes_read_no_weight(self, config):
        model, adapter, _ = self.parts(config)
        view = adapter.to_canonical(model)
        assert canonical_shapes(adapter, model) == {k: tuple(v.shape) for k, v in view.items()}

    def test_every_class_alone_and_composed_keeps_logits(self, config):
        model, _, arch = self.parts(config, seed=1)
        checks = verify_model(model, seed=1, tol=TOL)
        names = [c.name for c in checks]
        assert len(names) == len(set(names)), names
        assert set(names) == expected_checks(arch)
        assert self.declared_checks <= set(names), self.declared_checks - set(names)
        # splitting MLP units (a semi-permutation) is exact for ReLU units alone (relu(a·x) = a·relu(x), a ≥ 0)
        assert ("mlp:semi-permutation" in names) == arch.relu, names
        bad = [c for c in checks if not (c.ok and c.max_dlogits <= TOL and c.dloss <= TOL)]
        assert not bad, bad

    def test_canonical_model_is_canonical_and_keeps_logits(self, config):
        model, adapter, arch = self.parts(config)
        canon = canonical_model(model)
        assert type(canon) is type(model) and not canon.training
        assert is_canonical(adapter.to_canonical(canon), arch)
        if arch.centred_stream:  # folding and centring really moved something (the factory perturbed the norms)
            assert not is_canonical(adapter.to_canonical(model), arch)
        assert max_diff(model, canon, probe_inputs(model)) <= TOL

    def test_inputs_are_left_untouched(self, config):
        # canonicalising a view and transforming a model return new objects; the caller's ones stay as they were
        model, adapter, arch = self.parts(config)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        view = adapter.to_canonical(model)
        snapshot = {k: v.clone() for k, v in view.items()}
        canonicalise(view, arch)
        transform_model(model, random_full_transform(arch, torch.Generator().manual_seed(6)))
        assert not view_diff(view, snapshot, atol=0.0)
        after = model.state_dict()
        assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)

    def test_consecutive_classes_compose_keeping_logits(self, config):
        # one class's element, then the next one's: `then` of transforms acting on different groups
        model, _, arch = self.parts(config)
        canon = canonical_model(model)
        x = probe_inputs(model)
        gen = torch.Generator().manual_seed(7)
        classes = [c for c in exact_classes(arch) if is_invertible_class(c, arch)]
        for a, b in zip(classes, classes[1:] + classes[:1]):
            t = random_class_element(a, arch, gen).then(random_class_element(b, arch, gen), arch)
            assert max_diff(model, transform_model(canon, t), x) <= TOL, (a, b)

    def test_random_elements_invert_and_compose(self, config):
        model, adapter, arch = self.parts(config)
        canon = canonical_model(model)
        gen = torch.Generator().manual_seed(4)
        t = random_full_transform(arch, gen)
        moved = transform_model(canon, t)
        assert len(state_diff(canon, moved, exact=False, atol=0.1)) > 0, "the transform moved nothing"
        back = transform_model(moved, t.inverse(arch), canonicalise_first=False)
        assert not state_diff(canon, back, exact=False), "t.inverse did not restore the canonical weights"
        # every invertible class alone, too (on the view: transform_model is to_canonical, apply, from_canonical)
        view = adapter.to_canonical(canon)
        for cls in exact_classes(arch):
            if is_invertible_class(cls, arch):
                e = random_class_element(cls, arch, gen)
                there = e.apply(view, arch)
                bad = view_diff(view, e.inverse(arch).apply(there, arch))
                assert not bad, (cls, bad)
        # composition: t1.then(t2) is t1, then t2
        t1, t2 = random_full_transform(arch, gen), random_full_transform(arch, gen)
        seq = transform_model(transform_model(canon, t1), t2, canonicalise_first=False)
        once = transform_model(canon, t1.then(t2, arch), canonicalise_first=False)
        assert not state_diff(seq, once, exact=False)
        assert max_diff(model, once, probe_inputs(model)) <= TOL

    def test_weight_matching_recovers_a_planted_symmetry(self, config):
        model, adapter, arch = self.parts(config)
        view_a = canonicalise(adapter.to_canonical(model), arch)
        planted = random_full_transform(arch, torch.Generator().manual_seed(3))
        view_b = planted.apply(view_a, arch)
        assert view_distance(view_a, view_b) > 0.1
        found, log = weight_matching(view_a, view_b, arch, progress=False)
        recovered = found.apply(view_b, arch)
        assert recovered.keys() == view_a.keys()
        dist = view_distance(view_a, recovered)
        assert dist <= MATCH_TOL, (dist, log)
        x = probe_inputs(model)
        assert max_diff(model, adapter.from_canonical(view_b, model), x) <= TOL
        assert max_diff(model, adapter.from_canonical(recovered, model), x) <= TOL

    def test_circuit_form_reproduces_the_logits_or_is_refused(self, config):
        """The paper's circuit form (glmc/view/circuit.py) computes the model's logits; a family without one is
        refused by name (UnsupportedModel), never approximated."""
        from glmc.view.circuit import circuit_model

        model, adapter, _ = self.parts(config)
        try:
            circuit = circuit_model(model)
        except UnsupportedModel as e:
            assert config not in self.circuit_configs, f"{config} has a circuit form, refused: {e}"
            return
        x = probe_inputs(model)
        with torch.no_grad():
            assert float((logits(model, x) - circuit(**batch_of(adapter, x))).abs().max()) <= TOL

    def test_paper_circuit_matching_recovers_a_planted_symmetry(self, config):
        """--mode circuit without data runs the paper's alternation (glmc/matching/paper.py): from B = π(A) it must
        find a transform whose circuits are A's (per-head maps are absorbed by circuits, so the native weights may
        differ); a model without a circuit form is refused by the adapter's reason."""
        from glmc.matching.paper import paper_weight_matching
        from glmc.matching.weight import align
        from glmc.options import WeightOptions
        from glmc.view.circuit import circuit_params

        model, adapter, arch = self.parts(config)
        try:
            adapter.io_spec(model)
        except UnsupportedModel:
            with pytest.raises(UnsupportedModel):
                align(model, self.make(config, 1), WeightOptions(mode="circuit", progress=False))
            return
        view_a = canonicalise(adapter.to_canonical(model), arch)
        view_b = random_full_transform(arch, torch.Generator().manual_seed(3)).apply(view_a, arch)
        found, log = paper_weight_matching(view_a, view_b, arch, progress=False)
        ca, cb = circuit_params(view_a, arch.n_layer), circuit_params(found.apply(view_b, arch), arch.n_layer)
        before = circuit_params(view_b, arch.n_layer)
        scale = sum(float(ca[k].double().pow(2).sum()) for k in ca)
        assert sum(float((ca[k] - before[k]).double().pow(2).sum()) for k in ca) / scale > 0.1
        rel = sum(float((ca[k] - cb[k]).double().pow(2).sum()) for k in ca) / scale
        assert rel <= MATCH_TOL, (rel, log[-3:])

    def test_one_pass_distance_is_the_distance_of_the_moved_model(self, config):
        # weight matching reads each iteration's distance off the residual fit's pass (ResidualPass); it must be
        # the distance of the model actually moved, for every tensor the residual touches
        model, adapter, arch = self.parts(config)
        view_a = canonicalise(adapter.to_canonical(model), arch)
        other = self.make(config, 1)
        view_b = canonicalise(adapter.to_canonical(other), arch)
        t = random_full_transform(arch, torch.Generator().manual_seed(5))
        inner = {k: e for k, e in t.elements.items() if k != "residual"}
        fitted = ResidualPass(view_a, view_b, inner, arch, residual_keys(view_a, arch.n_layer), "norms")
        for res in (t.elements["residual"], kind(arch.groups["residual"].kind).nearest(fitted.fit)):
            exact = streamed_distance(view_a, view_b, {**inner, "residual": res}, arch)
            assert fitted.distance(res) == pytest.approx(exact, rel=1e-6), config  # float32 weights: ~1e-8

    @pytest.mark.parametrize("residual", ["permutation", "orthogonal"])
    def test_activation_matching_recovers_a_planted_permutation(self, config, residual):
        """B is A with a random element planted in every group activation matching searches (residual, heads or
        key/value groups and the query heads inside them, value dimensions, MLP units): its correlations of
        identical features are 1 exactly where the permutation put them, so it must undo the plant. With the
        residual group's own map ("orthogonal"), a random element of that group is planted on the residual: B's
        stream is A's times it, so the least-squares fit on their cross moments is its inverse."""
        from glmc.data.iterable import IterableData
        from glmc.matching.activation import align as activation_align
        from glmc.options import ActivationOptions
        from glmc.symmetry.elements import IndexMap, LinearMap

        model, adapter, arch = self.parts(config)
        view_a = canonicalise(adapter.to_canonical(model), arch)
        gen = torch.Generator().manual_seed(5)
        planted = Transform()
        for i in range(arch.n_layer):
            for role, spec in arch.groups.items():
                name = group_name(role, i if spec.per_layer else None)
                if role == "residual" and residual == "orthogonal":
                    planted.elements[name] = kind(spec.kind).random(spec.size, spec.batch, gen)
                elif role in ("residual", "heads", "kv_heads", "mlp"):
                    planted.elements[name] = IndexMap(torch.randperm(spec.size, generator=gen), None, spec.size)
                elif role == "query_heads":
                    planted.elements[name] = kind(spec.kind).random(spec.size, spec.batch, gen)
                elif role == "ov":
                    n = spec.batch or arch.n_head
                    eye = torch.eye(spec.size)
                    planted.elements[name] = LinearMap(torch.stack(
                        [eye[:, torch.randperm(spec.size, generator=gen)] for _ in range(n)]))
        model_b = adapter.from_canonical(planted.apply(view_a, arch), model)
        x = probe_inputs(model, n=16)
        batch = x if adapter.task in ("lm", "mlm") else (x, torch.zeros(x.shape[0], dtype=torch.long))
        data = IterableData([batch], adapter.task)
        try:
            options = ActivationOptions(train_batches=1, progress=False, residual=residual)
            found = activation_align(model, model_b, options, data=data)
        except UnsupportedModel as e:  # a family whose groups activation matching cannot fill says so
            assert "activation matching" in str(e)
            return
        assert found.report["distance_before"] > 0.1
        if not arch.relu:
            assert found.report["distance_after"] <= MATCH_TOL, found.report["distance_after"]
            return
        # ReLU units that never fire on the probe have no correlations to match by: everything else must be
        # recovered, and any MLP unit left unmatched must be such a dead unit
        from glmc.matching.activation import _record
        from glmc.matching.common import canonical_cpu_view

        va, vb = canonical_cpu_view(adapter, found.model_a), canonical_cpu_view(adapter, found.model_b)
        acts = {}
        canon = adapter.from_canonical(view_a, model)
        hooks = _record(adapter, canon, acts)
        forward(canon, next(data.batches("train")))
        for h in hooks:
            h.remove()
        for k in va:
            unit_axis = 0 if va[k].ndim == 1 or va[k].shape[0] == arch.d_mlp else -1  # the MLP's unit axis
            diff = (va[k] - vb[k]).abs().movedim(unit_axis, 0)
            wrong = diff.reshape(diff.shape[0], -1).amax(-1) > 1e-5 * va[k].abs().max()
            if ".mlp.in." in k or k.endswith(".mlp.out.w"):
                hidden = acts[k.rsplit(".mlp.", 1)[0] + ".mlp.out"]
                dead = hidden.reshape(-1, hidden.shape[-1]).abs().amax(0) == 0
                assert not (wrong & ~dead).any(), k
            else:
                assert not wrong.any(), k

    def test_save_and_reload_keep_logits(self, config, tmp_path):
        model, adapter, arch = self.parts(config)
        x = probe_inputs(model)
        save_model(model, tmp_path / "m")
        again, _ = load_model(tmp_path / "m")
        assert type(again) is type(model) and not again.training
        assert not state_diff(model, again)
        assert adapter.is_tied(again) == adapter.is_tied(model)
        assert max_diff(model, again, x) == 0.0
        # a transformed model is a standard checkpoint of the family too, and so is its transform file
        t = random_full_transform(arch, torch.Generator().manual_seed(5))
        moved = transform_model(model, t)
        save_model(moved, tmp_path / "moved")
        moved_again, _ = load_model(tmp_path / "moved")
        assert not state_diff(moved, moved_again)
        assert max_diff(moved, moved_again, x) == 0.0
        assert max_diff(model, moved_again, x) <= TOL
        if hasattr(type(model), "from_pretrained"):  # a Hugging Face class reads what glmc wrote, on its own
            native = type(model).from_pretrained(tmp_path / "moved").eval()
            assert max_diff(moved, native, x) == 0.0
        t.save(tmp_path / "t.safetensors")
        loaded = Transform.load(tmp_path / "t.safetensors")
        assert loaded.describe() == t.describe()
        view = canonicalise(adapter.to_canonical(model), arch)
        assert not view_diff(t.apply(view, arch), loaded.apply(view, arch), atol=0.0)

    def test_verify_cli_passes_on_a_saved_transformed_model(self, config, tmp_path):
        # a transformed model (canonical form, moved by a random element) is a checkpoint like any other; the raw
        # factory model's folding is verified in process by test_every_class_alone_and_composed_keeps_logits
        model, adapter, arch = self.parts(config)
        moved = transform_model(model, random_full_transform(arch, torch.Generator().manual_seed(8)))
        save_model(moved, tmp_path / "m")
        out = run_cli("verify", tmp_path / "m")  # fails the test unless it exits 0
        assert f"all {len(expected_checks(arch))} checks within 0.0001" in out, out
        assert f"{arch.family}, {arch.n_layer} layers, d_model {arch.d_model}, {arch.n_head} heads" in out, out
        for role in arch.unsupported:
            assert any(line.split()[:2] == [role, "skipped"] for line in out.splitlines()), out

    def test_widening_keeps_the_logits_or_is_refused_with_the_declared_reason(self, config, tmp_path):
        """A model embedded into twice its width (glmc/view/widen.py) is a checkpoint of the same family that
        computes the same function; a family declaring the rectangular class unsupported refuses with its reason."""
        from glmc.view.model_ops import widen_model

        model, _, arch = self.parts(config)
        if "rectangular" in arch.unsupported:
            with pytest.raises(UnsupportedModel) as refused:
                widen_model(model, 2 * arch.d_model)
            assert arch.unsupported["rectangular"] in str(refused.value)
            return
        wide = widen_model(model, 2 * arch.d_model)
        save_model(wide, tmp_path / "wide")
        again, _ = load_model(tmp_path / "wide")
        wide_arch = adapter_for(again).arch(again)
        assert type(again) is type(model) and (wide_arch.d_model, wide_arch.n_layer) == (2 * arch.d_model, arch.n_layer)
        assert max_diff(model, again, probe_inputs(model)) <= TOL

    def test_declarations_are_consistent(self, config):
        model, adapter, arch = self.parts(config)
        view = adapter.to_canonical(model)
        groups = instantiate(arch.groups, arch.n_layer, view.keys())
        for role, spec in arch.groups.items():
            names = [group_name(role, i) for i in (range(arch.n_layer) if spec.per_layer else [None])]
            missing = [g for g in names if g not in groups]
            assert not missing, f"declared {role!r} acts on no tensor for {missing}"
            if spec.follows is not None:
                assert spec.follows in arch.groups, f"{role} follows undeclared {spec.follows!r}"
        for g in groups.values():
            assert g.actions
            for a in g.actions:
                assert a.key in view, a
                t = view[a.key]
                size = t.shape[a.axis]
                assert size >= g.spec.size and size % g.spec.size == 0, (a, tuple(t.shape), g.spec)
                if a.batch_axis is not None:
                    assert g.spec.batch and t.shape[a.batch_axis] % g.spec.batch == 0, (a, tuple(t.shape), g.spec)
        # every tensor of the view is moved by some group, except those every symmetry leaves alone
        touched = {a.key for g in groups.values() for a in g.actions}
        alone = [k for k in view if k not in touched and not k.endswith(UNTOUCHED)]
        assert not alone, f"tensors no declared group acts on: {alone}"
        # every declared class yields an element that acts (strictly) on this view
        gen = torch.Generator().manual_seed(7)
        for cls in exact_classes(arch):
            e = random_class_element(cls, arch, gen)
            assert set(e.elements) <= set(groups), cls
            out = e.apply(view, arch)
            assert out.keys() == view.keys(), cls
        # unsupported roles are not declared, and asking for them is refused with the adapter's reason
        for role, why in arch.unsupported.items():
            assert why and role not in arch.groups and role not in exact_classes(arch)
            with pytest.raises((ValueError, UnsupportedModel)):
                random_class_element(role, arch, gen)
            with pytest.raises(UnsupportedModel):
                verify_model(model, classes=[role])

    def test_every_key_lands_in_one_part_and_all_parts_make_the_whole_path(self, config):
        """The barrier decomposition (glmc/paths/decompose.py) from this family's declarations: each grouping
        partitions the canonical keys, and interpolating every part together reproduces the whole path exactly."""
        from glmc.paths.decompose import decompose_path
        from glmc.symmetry.parts import groupings
        from glmc.tasks import task as get_task

        a, adapter, arch = self.parts(config)
        b = self.make(config, seed=1)
        view = adapter.to_canonical(a)
        for grouping, by_part in groupings(view, arch.part_roles).items():
            keys = [k for ks in by_part.values() for k in ks]
            assert sorted(keys) == sorted(view), f"{grouping}: a key in no part or in two"
        x = probe_inputs(a, n=2, seq=8)
        gen = torch.Generator().manual_seed(3)
        classes = logits(a, x).shape[-1]
        task = get_task(arch.task)  # the target key and shape come from the task registry
        target = torch.randint(0, classes, x.shape[:2] if task.per_position else x.shape[:1], generator=gen)
        batch = {**batch_of(adapter, x), task.target_key: target}
        d = decompose_path(a, b, [batch], arch.task, [0.0, 0.5, 1.0], by=("cells",))
        assert not d["uncovered_keys"] and d["all_parts_max_abs_diff"] == 0.0, d["all_parts_max_abs_diff"]
        assert sum(p["parameters"] for p in d["parts"]["cells"].values()) == sum(v.numel() for v in view.values())
