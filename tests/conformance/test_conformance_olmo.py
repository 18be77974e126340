"""HF OLMo (v1) decoders through the adapter conformance suite (adapter_suite.py), and the checks that the
maps inside heads under clip_qkv are exactly the declared ones: quarter turns of rotary planes (QK) and signed
permutations (OV) (docs/families-qwen3-gemma-olmo.md)."""

import pytest
import torch

from adapter_suite import AdapterConformance, max_diff, state_diff
from factories import decoder, factory
from glmc.adapters import UnsupportedModel, adapter_for
from glmc.invariance import probe_inputs
from glmc.symmetry.elements import LinearMap
from glmc.symmetry.kinds import ScaleRotation, kind
from glmc.symmetry.transform import Transform
from glmc.view.model_ops import canonical_model, logits, transform_model, widen_model

OLMO = "OlmoForCausalLM"
CLIP = 0.5  # clamps a third of the q/k/v entries of these models on the probe inputs (checked below)


class TestOlmoConformance(AdapterConformance):
    family = "olmo"
    declared_checks = {"canonical", "residual", "residual:permutation", "query_heads", "kv_heads", "qk", "ov", "mlp",
                       "mlp:zero-pad", "mlp_scale", "composed", "composed∘inverse"}
    configs = {
        "olmo-L2-d32-h4kv2-gqa": factory(OLMO),
        "olmo-L2-d32-h4kv2-gqa-clip": factory(OLMO, clip_qkv=CLIP),
        "olmo-L2-d32-h4kv4-mha-clip-bias-tied": factory(OLMO, kv=4, clip_qkv=CLIP, attention_bias=True, tied=True),
        "olmo-L1-d24-h2kv1-mqa-relu-clip": factory(OLMO, layers=1, width=24, heads=2, kv=1, mlp=36,
                                                   hidden_act="relu", clip_qkv=CLIP),
    }

    def test_configs_cover_activations_and_head_shapes(self):
        archs = [adapter_for(m).arch(m) for m in (self.make(c) for c in self.configs)]
        assert len({a.activation for a in archs}) >= 2 and not any(a.relu for a in archs)
        assert len({(a.n_head, a.d_head) for a in archs}) >= 2
        assert {(a.groups["qk"].kind, a.groups["ov"].kind) for a in archs} == {
            ("scale-rotation", "invertible"), ("plane-quarter-turn", "head-signed-permutation")}

    def test_factory_builds_a_perturbed_model(self, config):
        """OLMo's norms have no parameters (nothing to perturb), declared so; the rest as the base test."""
        model, adapter, arch = self.parts(config)
        assert adapter.family == self.family == arch.family and not model.training
        assert not state_diff(model, self.make(config, 0)) and state_diff(model, self.make(config, 1))
        assert not any("norm" in k for k in model.state_dict())
        view = adapter.to_canonical(model)
        assert not [k for k in view if ".ln" in k or k.startswith("ln_")]
        assert len(arch.norms) == 3 and {(s.kind, s.gain) for s in arch.norms.values()} == {("layernorm", None)}
        assert view["blocks.0.attn.q.w"].shape == (arch.n_head, arch.d_head, arch.d_model)
        assert arch.norm == "layernorm" and arch.groups["residual"].kind == "orthogonal-fixing-ones"
        out = logits(model, probe_inputs(model))
        assert torch.isfinite(out).all() and 0.3 < float(out.abs().max()) < 1e3

    def test_clip_qkv_clamps_on_the_probe_inputs(self, config):
        model, _, _ = self.parts(config)
        clip = model.config.clip_qkv
        if clip is None:
            return
        seen = []
        attn = model.model.layers[0].self_attn
        hooks = [m.register_forward_hook(lambda mod, args, out: seen.append(out.detach().clone()))
                 for m in (attn.q_proj, attn.k_proj, attn.v_proj)]
        logits(model, probe_inputs(model))
        for h in hooks:
            h.remove()
        for out in seen:  # the hook sees the projection before the in-place clamp
            clamped = float((out.abs() > clip).double().mean())
            assert 0.05 < clamped < 0.95, clamped


def _t(role: str, maps: dict) -> Transform:
    return Transform({f"{role}.{i}": LinearMap(m) for i, m in maps.items()})


@pytest.fixture(scope="module")
def olmos():
    """The same weights with and without clip_qkv, canonical."""
    clipped, free = decoder(OLMO, clip_qkv=CLIP), decoder(OLMO)
    return canonical_model(clipped), canonical_model(free), probe_inputs(clipped)


def _change(model, role, maps, x):
    return max_diff(model, transform_model(model, _t(role, maps), canonicalise_first=False), x)


def test_quarter_turns_and_signed_permutations_keep_the_clamped_function(olmos):
    clipped, _, x = olmos
    arch = adapter_for(clipped).arch(clipped)
    n_kv, dh, h = arch.groups["qk"].batch, arch.d_head, arch.d_head // 2
    gen = torch.Generator().manual_seed(0)
    # J on every plane (q_i, q_{i+h}) ↦ (−q_{i+h}, q_i): a signed permutation commuting with RoPE
    j = ScaleRotation.matrix(torch.tensor([0.0, 1.0], dtype=torch.float64).expand(n_kv, h, 2))
    assert _change(clipped, "qk", {i: j for i in range(arch.n_layer)}, x) <= 1e-5
    turns = {i: kind("plane-quarter-turn").random(dh, n_kv, gen).matrix for i in range(arch.n_layer)}
    assert _change(clipped, "qk", turns, x) <= 1e-5
    signed = {i: kind("head-signed-permutation").random(dh, n_kv, gen).matrix for i in range(arch.n_layer)}
    assert _change(clipped, "ov", signed, x) <= 1e-5


def test_the_clamp_removes_the_continuous_maps_inside_heads(olmos):
    """Scale-rotations (QK) and invertible maps (OV) keep the unclipped model and change the clipped one; so do
    signed permutations that do not respect the rotary planes (QK) and orthogonal maps that are not signed
    permutations (OV)."""
    clipped, free, x = olmos
    arch = adapter_for(clipped).arch(clipped)
    n_kv, dh, h = arch.groups["qk"].batch, arch.d_head, arch.d_head // 2
    gen = torch.Generator().manual_seed(1)
    layers = range(arch.n_layer)
    rot = {i: kind("scale-rotation").random(dh, n_kv, gen).matrix for i in layers}
    inv = {i: kind("invertible").random(dh, n_kv, gen).matrix for i in layers}
    assert _change(free, "qk", rot, x) <= 1e-4 and _change(free, "ov", inv, x) <= 1e-4
    assert _change(clipped, "qk", rot, x) > 1e-2 and _change(clipped, "ov", inv, x) > 1e-2
    # a pure rotation of each plane by 45° (the farthest from a quarter turn) keeps every RMS but not the clamp;
    # these models' small queries make attention nearly uniform, so the change is small, yet 100× float noise
    angle = torch.full((n_kv, h), torch.pi / 4, dtype=torch.float64)
    assert _change(clipped, "qk", {i: ScaleRotation.matrix(torch.stack([angle.cos(), angle.sin()], -1))
                                   for i in layers}, x) > 1e-3
    # swapping coordinates of two different planes: a signed permutation RoPE does not commute with
    perm = torch.arange(dh)
    perm[[0, 1]] = perm[[1, 0]]
    swap = torch.eye(dh, dtype=torch.float64)[perm].expand(n_kv, dh, dh)
    assert _change(clipped, "qk", {i: swap for i in layers}, x) > 1e-2
    # the swap inside one plane without the sign (a reflection, not J)
    perm = torch.arange(dh)
    perm[[0, h]] = perm[[h, 0]]
    reflect = torch.eye(dh, dtype=torch.float64)[perm].expand(n_kv, dh, dh)
    assert _change(clipped, "qk", {i: reflect for i in layers}, x) > 1e-2
    orth = {i: kind("orthogonal").random(dh, n_kv, gen).matrix for i in layers}
    assert _change(clipped, "ov", orth, x) > 1e-2


def test_widening_and_later_olmos_are_refused_by_name():
    import transformers

    with pytest.raises(UnsupportedModel, match="hard-codes"):
        widen_model(decoder(OLMO, layers=1), 64)
    cfg = transformers.Olmo2Config(vocab_size=61, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=40)
    with pytest.raises(UnsupportedModel, match="Olmo2ForCausalLM: .*signed permutations"):
        adapter_for(transformers.Olmo2ForCausalLM(cfg))


@pytest.mark.parametrize("value, match", [("abc", "takes a positive number or none, got 'abc'"),
                                          ("-1", "must be positive")])
def test_a_bad_clip_qkv_is_refused_in_one_line_before_training(value, match, tmp_path):
    from click.testing import CliRunner

    from glmc.cli import main

    result = CliRunner().invoke(main, ["train", "olmo", "--clip-qkv", value, "--out", str(tmp_path / "m")])
    err = result.output.strip()
    assert result.exit_code == 1 and err.startswith("Error: --clip-qkv") and len(err.splitlines()) == 1, err
    assert match in err and not (tmp_path / "m").exists()


def test_the_preset_clips_and_none_turns_it_off():
    from glmc.adapters import adapter_named

    adapter = adapter_named("olmo")
    p = dict(adapter.training.presets["cpu"], data="shakespeare")
    assert p["clip_qkv"] == 8.0
    for given, want in (("none", None), ("2.5", 2.5)):
        q = dict(p, clip_qkv=given)
        adapter.training.data_spec(q, {"clip_qkv"}, print)
        assert q["clip_qkv"] == want
