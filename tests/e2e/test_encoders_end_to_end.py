"""Encoders end to end (docs/encoders.md): BERTs aligned and merged by the real CLI load as standard Hugging Face
masked LMs that fill masks, and a text source on the command line is read as the encoders' blocks."""

import torch

from conftest import run_cli
from glmc.matching.common import max_logit_change


def test_aligned_and_merged_encoders_load_as_masked_lms_and_fill_masks(mlm_text_file, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    import glmc.data
    from glmc.models import save_model

    ds = glmc.data.load({"task": "mlm", "source": f"text:{mlm_text_file}", "tokenizer": "wordpiece:120", "context": 24})
    from glmc.adapters import adapter_named

    for seed in (0, 1):
        torch.manual_seed(seed)
        bert = adapter_named("bert")
        model = bert.build(**bert.training.data_shape(ds), layers=1, width=16, heads=2, mlp=24)
        save_model(model, tmp_path / f"m{seed}", record={"family": "bert", "data": ds.spec}, tokenizer=ds.tokenizer)
    run_cli("align", tmp_path / "m0", tmp_path / "m1", "--out", tmp_path / "aligned", "--no-progress")
    run_cli("merge", tmp_path / "m0", tmp_path / "m1", "--out", tmp_path / "merged", "--no-progress")
    original = AutoModelForMaskedLM.from_pretrained(str(tmp_path / "m1")).eval()
    for out in ("aligned", "merged"):
        model = AutoModelForMaskedLM.from_pretrained(str(tmp_path / out)).eval()
        tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / out))
        assert type(model).__name__ == "BertForMaskedLM"
        fill = pipeline("fill-mask", model=model, tokenizer=tokenizer)
        guesses = fill(f"a single man in possession of a good {tokenizer.mask_token}.")
        assert len(guesses) == 5 and all(isinstance(g["token_str"], str) for g in guesses)
    aligned = AutoModelForMaskedLM.from_pretrained(str(tmp_path / "aligned")).eval()
    assert max_logit_change(original, aligned) <= 1e-4


def test_a_text_source_on_the_command_line_is_read_as_the_encoders_blocks(mlm_text_file, tmp_path):
    import glmc.data
    from glmc.adapters import adapter_named
    from glmc.models import save_model

    ds = glmc.data.load({"task": "mlm", "source": f"text:{mlm_text_file}", "tokenizer": "wordpiece:120", "context": 24})
    torch.manual_seed(0)
    bert = adapter_named("bert")
    model = bert.build(**bert.training.data_shape(ds), layers=1, width=16, heads=2, mlp=24)
    save_model(model, tmp_path / "m", tokenizer=ds.tokenizer)
    out = run_cli("barrier", tmp_path / "m", tmp_path / "m", "--data", f"text:{mlm_text_file}", "--points", 2,
                  "--json", tmp_path / "b.json", "--no-progress")
    assert "none" in out
    import json

    spec = json.loads((tmp_path / "b.json").read_text())["data"]
    assert spec["task"] == "mlm" and spec["context"] == 24 and spec["tokenizer"].startswith("pretrained:")
