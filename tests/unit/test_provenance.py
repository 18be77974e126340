"""glmc/provenance.py: each part of the provenance block says what it claims (issue #46)."""

import subprocess
from pathlib import Path

import torch

from factories import tiny_gpt2
from glmc import provenance as pv
from glmc.options import WeightOptions


def test_code_is_this_checkout_with_its_dirty_flag():
    code = pv.code_state()
    root = Path(pv.__file__).resolve().parents[2]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True).stdout.strip())
    assert code == {"commit": head, "dirty": dirty, "checkout": str(root)}


def test_weights_fingerprints_tell_seeds_apart_and_are_stable(tmp_path):
    for seed in (0, 1):
        tiny_gpt2(seed=seed).save_pretrained(tmp_path / f"s{seed}")
    a, b = (pv.model_record(tmp_path / f"s{seed}") for seed in (0, 1))
    assert a["path"] == str(tmp_path / "s0") and [w["file"] for w in a["weights"]] == ["model.safetensors"]
    assert a["weights"][0]["fingerprint"] != b["weights"][0]["fingerprint"]  # same header, other values
    assert a == pv.model_record(tmp_path / "s0")
    f = tmp_path / "s0" / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[-3] ^= 0xFF  # one byte of the last tensor, inside the last sampled block
    f.write_bytes(bytes(data))
    assert pv.model_record(tmp_path / "s0") != a


def test_in_memory_models_are_fingerprinted_by_their_values():
    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=0)
    assert pv.model_record(a) == pv.model_record(b)
    with torch.no_grad():
        next(b.parameters()).add_(1.0)
    assert pv.model_record(a)["fingerprint"] != pv.model_record(b)["fingerprint"]
    assert pv.model_record(a)["parameters"] == sum(p.numel() for p in a.state_dict().values())


def test_data_record_hashes_batches_and_named_files(tmp_path):
    batches = [torch.arange(12).reshape(3, 4), torch.ones(3, 4, dtype=torch.long)]
    same = [b.clone() for b in batches]
    other = [batches[0], torch.zeros(3, 4, dtype=torch.long)]
    assert pv.batches_hash(batches) == pv.batches_hash(same) != pv.batches_hash(other)
    f = tmp_path / "d.jsonl"
    f.write_text('{"text": "hello"}\n')
    rec = pv.data_record({"spec": f"jsonl:{f}:text", "batches": batches})
    assert rec["batches"] == 2 and rec["batches_sha256"] == pv.batches_hash(batches)
    assert rec["files"] == [{"path": str(f), "sha256": pv.file_hash(f)}]
    assert pv.data_record("shakespeare") == {"spec": "shakespeare", "files": []}


def test_full_options_hold_every_field_with_the_given_values():
    got = pv.full_options("weight", {"iterations": 3, "mode": "native", "data": object()})
    assert got["method"] == "weight" and got["iterations"] == 3 and "data" not in got
    assert set(WeightOptions.names()) <= set(got)
    assert got["tol"] == WeightOptions().tol
    assert pv.full_options("none", {"null_space": "off"}) == {"method": "none", "null_space": "off"}


def test_the_block_names_versions_device_and_time():
    p = pv.provenance(options=WeightOptions(iterations=2), seeds=[3], device="cpu")
    assert p["schema"] == "glmc.provenance/1" and p["seeds"] == [3]
    assert p["options"]["iterations"] == 2 and p["versions"]["torch"] and p["versions"]["transformers"]
    assert p["device"]["type"] == "cpu" and p["device"]["threads"] == torch.get_num_threads()
    assert p["created"].endswith("+00:00")
