"""`glmc inspect` / `glmc.inspect`: what each checkpoint is, its symmetry groups, and whether models can be aligned
(every reason once); align, barrier and merge stop with the same reason."""

import json

import pytest
import torch

import glmc
from conftest import run_cli
from factories import SHAPES  # one small shape per registered family (every one is inspected)
from glmc.models import build_model, save_model

CLASSES = {"gpt2": "GPT2LMHeadModel", "hf-vit": "ViTForImageClassification", "timm-vit": "VisionTransformer",
           "llama": "LlamaForCausalLM", "neox": "GPTNeoXForCausalLM", "qwen3": "Qwen3ForCausalLM",
           "gemma": "GemmaForCausalLM", "olmo": "OlmoForCausalLM", "bert": "BertForMaskedLM",
           "roberta": "RobertaForMaskedLM"}


def _save(root, name, family, seed=0, **changes):
    torch.manual_seed(seed)
    path = root / name
    save_model(build_model(family, **{**SHAPES[family], **changes}), path)
    return path


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    out = {f: _save(root, f, f) for f in SHAPES}
    out.update({
        "gpt2-b": _save(root, "gpt2-b", "gpt2", seed=1), "gpt2-deep": _save(root, "gpt2-deep", "gpt2", layers=2),
        "gpt2-vocab": _save(root, "gpt2-vocab", "gpt2", vocab_size=31),
        "gpt2-ctx": _save(root, "gpt2-ctx", "gpt2", context=16),
        "gpt2-heads": _save(root, "gpt2-heads", "gpt2", heads=4),
        "gpt2-width": _save(root, "gpt2-width", "gpt2", width=32, mlp=16),
        "vit-classes": _save(root, "vit-classes", "hf-vit", num_classes=4),
        "vit-patch": _save(root, "vit-patch", "hf-vit", patch=2),
        "llama-kv": _save(root, "llama-kv", "llama", kv_heads=2),
    })
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    for name, chars in (("gpt2", "abcdefghijklmnopqrstuvwxyz.,?"), ("gpt2-b", "abcdefghijklmnopqrstuvwxyz.,!")):
        vocab = {"[UNK]": 0, **{c: i + 1 for i, c in enumerate(chars)}}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
        PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(out[name])
    return out


@pytest.mark.parametrize("family", list(SHAPES))
def test_inspect_reports_every_family(zoo, family):
    report = json.loads(run_cli("inspect", zoo[family], "--json"))
    (m,) = report["models"]
    assert (m["family"], m["class"], m["dtype"]) == (family, CLASSES[family], "float32")
    assert m["sizes"]["layers"] == 1 and m["sizes"]["d_model"] == 16 and m["parameters"] > 0
    assert m["weights"] == {"format": "safetensors", "files": 1, "sharded": False}
    assert m["groups"]["residual"]["size"] == 16 and m["groups"]["mlp"]["kind"] == "permutation"
    assert m["groups"]["residual"]["kind"] in ("orthogonal", "orthogonal-fixing-ones", "sign-permutation")
    text = run_cli("inspect", zoo[family])
    assert f"{family} ({CLASSES[family]}" in text and "residual" in text and "can be aligned" not in text
    if family == "llama":  # RoPE: what glmc refuses, and why
        assert "rectangular-heads" in m["refused"] and "refused" in text
    if family == "gpt2":
        assert m["tokenizer"]["sha256"] and m["sizes"]["vocabulary"] == [30]


PAIRS = [("gpt2", "hf-vit", "family"), ("gpt2", "gpt2-deep", "depth"), ("gpt2", "gpt2-vocab", "vocabulary"),
         ("gpt2", "gpt2-ctx", "positions"), ("hf-vit", "vit-patch", "patch"), ("hf-vit", "vit-classes", "classes"),
         ("gpt2", "gpt2-heads", "heads"), ("gpt2", "gpt2-width", "width"), ("llama", "llama-kv", "groups"),
         ("gpt2", "gpt2-b", "tokenizer")]


@pytest.mark.parametrize("a,b,reason", PAIRS, ids=[p[2] for p in PAIRS])
def test_incompatible_pairs_give_their_one_reason(zoo, a, b, reason, tmp_path):
    report = glmc.inspect(zoo[a], zoo[b])
    assert report["compatible"] is False and report["reason"] == reason, report["message"]
    from click.testing import CliRunner

    from glmc.cli import main
    from glmc.cli.inspect import CANNOT_ALIGN

    for extra in ([], ["--json"]):  # scripts tell "cannot be aligned" from success and from an error by the status
        shown = CliRunner().invoke(main, ["inspect", str(zoo[a]), str(zoo[b]), *extra])
        assert shown.exit_code == CANNOT_ALIGN == 3 and shown.exception is not None, shown.output
    assert shown.output.strip().startswith("{") and json.loads(shown.output)["reason"] == reason
    text = CliRunner().invoke(main, ["inspect", str(zoo[a]), str(zoo[b])]).output.splitlines()
    assert text[-1] == f"cannot be aligned ({reason}): {report['message']}"

    result = CliRunner().invoke(main, ["align", str(zoo[a]), str(zoo[b]), "--out", str(tmp_path / "o")])
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert result.exit_code == 1 and lines == [f"Error: {report['message']}"], result.output
    assert not (tmp_path / "o").exists()


def test_compatible_models_and_the_api(zoo):
    a, b = glmc.load_model(zoo["gpt2"]), glmc.load_model(zoo["gpt2-deep"])
    assert glmc.inspect(zoo["hf-vit"], zoo["hf-vit"])["compatible"] is True
    assert "can be aligned" in run_cli("inspect", zoo["hf-vit"], zoo["hf-vit"], zoo["hf-vit"])
    assert glmc.inspect(a, b)["reason"] == "depth"
    with pytest.raises(ValueError, match="models differ in depth"):
        glmc.merge([a, b], progress=False)
