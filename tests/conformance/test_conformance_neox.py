"""HF GPT-NeoX (Pythia) through the adapter conformance suite (adapter_suite.py), a checkpoint written with the
file names and config fields released Pythia checkpoints use, and the checks that the declared QK group is exactly
the one partial rotary embeddings allow."""

import json

import pytest
import torch
import transformers
from safetensors.torch import save_file

from adapter_suite import AdapterConformance, max_diff
from conftest import run_cli
from factories import neox, seeded
from glmc.adapters import UnsupportedModel, adapter_for, adapter_for_dir
from glmc.invariance import probe_inputs
from glmc.models import load_model
from glmc.symmetry.elements import LinearMap
from glmc.symmetry.kinds import kind
from glmc.symmetry.transform import Transform
from glmc.view.model_ops import canonical_model, transform_model


class TestNeoXConformance(AdapterConformance):
    family = "neox"
    declared_checks = {"canonical", "residual", "residual:permutation", "heads", "qk", "ov", "mlp", "mlp:zero-pad",
                       "rectangular", "composed", "composed∘inverse"}
    configs = {
        # Pythia's layout: parallel residual, a quarter of each head rotary (d_head 16: 4 rotary, 12 free)
        "neox-L2-d32-h2-rot0.25-parallel": seeded(neox, heads=2),
        "neox-L2-d32-h4-rot1.0-parallel": seeded(neox, rotary=1.0),
        "neox-L2-d32-h4-rot0.25-sequential": seeded(neox, parallel=False),
        "neox-L2-d32-h2-rot1.0-sequential-tied": seeded(neox, heads=2, rotary=1.0, parallel=False, tied=True),
        "neox-L1-d24-h2-rot0.5-relu-nobias-legacy": seeded(neox, layers=1, width=24, heads=2, mlp=36, rotary=0.5,
                                                           act="relu", bias=False, legacy=True),
    }

    def test_configs_cover_rotary_fractions_and_blocks(self):
        models = [self.make(c) for c in self.configs]
        archs = [adapter_for(m).arch(m) for m in models]
        assert {a.block for a in archs} == {"parallel", "sequential"}
        kinds = {(a.groups["qk"].kind, a.groups["qk"].params.get("rotary"), a.d_head) for a in archs}
        assert ("partial-rotary", 4, 16) in kinds and ("scale-rotation", None, 8) in kinds
        assert any(m.config.tie_word_embeddings for m in models)


def test_legacy_config_fields_set_the_rotary_dimensions():
    # released configs carry rotary_pct / rotary_emb_base; the config turns them into rope_parameters, and the
    # declared QK group follows what the forward rotates
    model = neox(width=32, heads=2, rotary=0.5, legacy=True)
    qk = adapter_for(model).arch(model).groups["qk"]
    assert (qk.kind, qk.params) == ("partial-rotary", {"rotary": 8})
    assert model.config.rope_parameters["partial_rotary_factor"] == 0.5


def test_declared_qk_group_is_the_exact_one():
    """Negative controls: the maps just outside the declared group change the function."""
    model = neox(width=32, heads=2)  # d_head 16, rotary 4
    arch = adapter_for(model).arch(model)
    canon = canonical_model(model)
    x = probe_inputs(model)
    gen = torch.Generator().manual_seed(0)

    def moved(m):
        return transform_model(canon, Transform({f"qk.{i}": m for i in range(arch.n_layer)}), canonicalise_first=False)

    # a general invertible QK map, and full-head scale-rotations (the Llama group), do not commute with partial RoPE
    assert max_diff(canon, moved(kind("invertible").random(16, 2, gen)), x) > 1e-2
    assert max_diff(canon, moved(kind("scale-rotation").random(16, 2, gen)), x) > 1e-2
    # a map that mixes the rotary block into the pass-through block
    m = kind("partial-rotary", rotary=4).random(16, 2, gen).matrix.clone()
    m[:, 0, 8] = 3.0
    assert max_diff(canon, moved(LinearMap(m)), x) > 1e-3
    # the declared group keeps it
    assert max_diff(canon, moved(kind("partial-rotary", rotary=4).random(16, 2, gen)), x) <= 1e-4


def _pythia_checkpoint(model, path):
    """`model` written as the released Pythia files are: the head as embed_out, the causal-mask buffers and RoPE's
    inverse frequencies beside the weights, and Pythia's config.json fields (no rope_parameters)."""
    path.mkdir()
    c = model.config
    tensors = {("embed_out.weight" if k == "lm_head.weight" else k): v.contiguous()
               for k, v in model.state_dict().items()}
    positions = c.max_position_embeddings
    for i in range(c.num_hidden_layers):
        p = f"gpt_neox.layers.{i}.attention."
        tensors[p + "bias"] = torch.tril(torch.ones(positions, positions, dtype=torch.bool))[None, None]
        tensors[p + "masked_bias"] = torch.tensor(-1e9)
        tensors[p + "rotary_emb.inv_freq"] = model.gpt_neox.rotary_emb.inv_freq.clone()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    fields = {"architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu",
              "hidden_size": c.hidden_size, "initializer_range": 0.02, "intermediate_size": c.intermediate_size,
              "layer_norm_eps": 1e-05, "max_position_embeddings": positions, "model_type": "gpt_neox",
              "num_attention_heads": c.num_attention_heads, "num_hidden_layers": c.num_hidden_layers,
              "rotary_emb_base": 10000, "rotary_pct": c.rope_parameters["partial_rotary_factor"],
              "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": "4.24.0",
              "use_cache": True, "use_parallel_residual": c.use_parallel_residual, "vocab_size": c.vocab_size}
    (path / "config.json").write_text(json.dumps(fields, indent=2))


@pytest.mark.parametrize("parallel", [True, False])
def test_pythia_files_load_verify_and_round_trip(tmp_path, parallel):
    model = neox(width=32, heads=2, parallel=parallel)
    _pythia_checkpoint(model, tmp_path / "pythia")
    assert adapter_for_dir(tmp_path / "pythia").family == "neox"
    loaded, _ = load_model(tmp_path / "pythia")
    x = probe_inputs(model)
    assert max_diff(model, loaded, x) == 0.0  # every weight read, the buffers ignored
    assert adapter_for(loaded).arch(loaded).groups["qk"].params == {"rotary": 4}
    out = run_cli("verify", tmp_path / "pythia")
    assert "all 11 checks within 0.0001" in out, out
    # a transformed model is written as transformers writes GPT-NeoX (embed_out), untied in weights and config,
    # and loads with AutoModelForCausalLM alone
    from glmc.symmetry.random import random_full_transform

    arch = adapter_for(loaded).arch(loaded)
    moved = transform_model(loaded, random_full_transform(arch, torch.Generator().manual_seed(2)))
    from glmc.models import save_model

    save_model(moved, tmp_path / "moved")
    config = json.loads((tmp_path / "moved" / "config.json").read_text())
    assert config["tie_word_embeddings"] is False and config["use_parallel_residual"] is parallel
    from safetensors import safe_open

    with safe_open(str(tmp_path / "moved" / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "embed_out.weight" in keys and not any(k.endswith(("masked_bias", "inv_freq")) for k in keys)
    again = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "moved")).eval()
    assert max_diff(model, again, x) <= 1e-4


def test_missing_weights_of_a_pythia_checkpoint_are_refused(tmp_path):
    model = neox(layers=1, width=32, heads=2)
    _pythia_checkpoint(model, tmp_path / "p")
    from safetensors.torch import load_file

    tensors = load_file(str(tmp_path / "p" / "model.safetensors"))
    del tensors["embed_out.weight"]
    save_file(tensors, str(tmp_path / "p" / "model.safetensors"), metadata={"format": "pt"})
    from glmc.errors import BadCheckpoint
    from glmc.models.checkpoint import check_files

    with pytest.raises(BadCheckpoint, match="embed_out"):
        check_files(tmp_path / "p")


def test_circuit_mode_is_refused_by_name():
    model = neox(layers=1)
    with pytest.raises(UnsupportedModel, match="circuit mode"):
        adapter_for(model).io_spec(model)


def test_train_neox_from_the_registry(tmp_path):
    """`glmc train neox` is generated from the adapter's declarations: its own options reach build()."""
    out = tmp_path / "n"
    run_cli("train", "neox", "--steps", "2", "--layers", "1", "--width", "16", "--heads", "2", "--mlp", "32",
            "--context", "16", "--sequential", "--rotary", "0.5", "--batch-size", "4", "--eval-every", "2",
            "--eval-batches", "1", "--out", out, "--quiet")
    record = json.loads((out / "glmc.json").read_text())
    assert record["family"] == "neox" and record["model"]["parallel"] is False and record["model"]["rotary"] == 0.5
    model, _ = load_model(out)
    qk = adapter_for(model).arch(model).groups["qk"]
    assert not model.config.use_parallel_residual and qk.params == {"rotary": 4}
