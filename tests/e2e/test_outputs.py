"""Outputs never touch inputs, and appear whole or not at all: real processes, real signals, real locks
(glmc/io.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from factories import tiny_gpt2
from glmc.io import atomic_dir, check_not_input, lock_output, recover

GLMC = Path(sys.executable).with_name("glmc")
ENV = {k: v for k, v in os.environ.items() if k != "GLMC_DEBUG"}


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def _siblings(path: Path) -> list[str]:
    """Everything beside `path` that glmc may have left: hidden entries named after it."""
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}."))


@pytest.fixture
def pair(tmp_path):
    for seed in (0, 1):
        tiny_gpt2(n_layer=1, n_embd=16, n_head=2, vocab=40, seed=seed).save_pretrained(tmp_path / f"m{seed}")
    return tmp_path / "m0", tmp_path / "m1"


def test_out_may_not_be_contain_or_lie_inside_an_input_through_symlinks(pair, tmp_path):
    a, b = pair
    link = tmp_path / "link"
    link.symlink_to(b, target_is_directory=True)
    for out, how in ((b, "is"), (link, "is"), (b / "sub", "lies inside"), (tmp_path, "contains")):
        with pytest.raises(ValueError, match=f"the output {out} {how} the input"):
            check_not_input(out, [a, b])
    # a cache snapshot: its files are symlinks into blobs/; the blobs folder holds the input's bytes
    snap, blobs = tmp_path / "snap", tmp_path / "blobs"
    blobs.mkdir()
    snap.mkdir()
    (blobs / "x").write_text("weights")
    (snap / "model.safetensors").symlink_to(blobs / "x")
    with pytest.raises(ValueError, match="contains the input"):
        check_not_input(blobs, [snap])
    check_not_input(tmp_path / "elsewhere", [a, b, snap])  # a fresh path passes


def test_swap_replaces_whole_and_leaves_no_sibling(tmp_path):
    out = tmp_path / "out"
    for text in ("old", "new"):
        with atomic_dir(out) as tmp:
            (tmp / "f.txt").write_text(text)
        assert (out / "f.txt").read_text() == text and _siblings(out) == []
    with pytest.raises(RuntimeError), atomic_dir(out) as tmp:
        (tmp / "f.txt").write_text("half")
        raise RuntimeError("failed mid-write")
    assert (out / "f.txt").read_text() == "new" and _siblings(out) == []


def test_a_kill_between_the_two_renames_is_recovered_on_the_next_run(tmp_path):
    """The state a kill between `out → .out.old` and `tmp → out` leaves: no out, the old one parked, the new one
    in its temporary directory. The next write to out first restores the old output, then replaces it whole."""
    out = tmp_path / "out"
    old, new = out.with_name(".out.old"), out.with_name(".out.abc123.tmp")
    for d, text in ((old, "old"), (new, "new-but-unfinished-run")):
        d.mkdir()
        (d / "f.txt").write_text(text)
    with lock_output(out):  # recovery runs under the lock
        assert (out / "f.txt").read_text() == "old" and _siblings(out) == [".out.lock"]
    assert _siblings(out) == []
    with atomic_dir(out) as tmp:
        (tmp / "f.txt").write_text("newer")
    assert (out / "f.txt").read_text() == "newer"
    recover(out)  # nothing to do
    assert (out / "f.txt").read_text() == "newer"


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from glmc.io import atomic_dir, terminate_cleanly
    terminate_cleanly()
    out = Path(sys.argv[1])
    with atomic_dir(out) as tmp:
        (tmp / "f.txt").write_text("new")
        print("writing", flush=True)
        time.sleep(60)
""")


def _start_writer(out: Path) -> subprocess.Popen:
    # a suite started in the background (`pytest &`) ignores SIGINT and its children inherit that; Ctrl-C reaches
    # a foreground process, so the writer starts with the default disposition (Python then raises KeyboardInterrupt)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)], stdout=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "writing"
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["int", "term", "kill"])
def test_a_signal_mid_write_leaves_the_whole_previous_output(tmp_path, sig):
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "f.txt").write_text("old")
    proc = _start_writer(out)
    assert (out / "f.txt").read_text() == "old"
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert proc.returncode != 0 and (out / "f.txt").read_text() == "old"
    if sig == signal.SIGKILL:  # nothing runs in a killed process: its hidden entries stay until the next run
        assert any(s.endswith(".tmp") for s in _siblings(out))
        with atomic_dir(out) as tmp:
            (tmp / "f.txt").write_text("next")
        assert (out / "f.txt").read_text() == "next"
    assert _siblings(out) == []


def test_a_second_run_on_the_same_out_is_refused_while_the_first_runs(pair, tmp_path):
    a, b = pair
    out = tmp_path / "out"
    first = _start_writer(out)
    try:
        proc = subprocess.run([str(GLMC), "align", a, b, "--out", out, "--overwrite", "--iterations", "1",
                               "--no-progress"], capture_output=True, text=True, env=ENV, timeout=120)
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.startswith("Error")]
    assert len(lines) == 1 and f"another glmc run (process {first.pid}) is writing" in lines[0], proc.stderr
    assert not out.exists() and _siblings(out) == []  # the first run was stopped before it swapped anything in
    done = subprocess.run([str(GLMC), "align", a, b, "--out", out, "--iterations", "1", "--no-progress"],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "model.safetensors").is_file() and _siblings(out) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["int", "term"])
def test_glmc_align_interrupted_keeps_the_previous_output_and_its_inputs(pair, tmp_path, sig):
    a, b = pair
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("an earlier result\n")
    inputs = {p: _tree(p) for p in pair}
    proc = subprocess.Popen([str(GLMC), "align", a, b, "--out", out, "--overwrite", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    deadline = time.time() + 60
    while not out.with_name(".out.lock").exists() and time.time() < deadline:  # the run has started its output
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # it finished first: the whole new output
        assert (out / "model.safetensors").is_file() and not (out / "keep.txt").exists()
    else:
        assert "Traceback" not in err and _tree(out) == {"keep.txt": b"an earlier result\n"}, err
    assert _siblings(out) == [] and {p: _tree(p) for p in pair} == inputs


def test_the_api_refuses_to_save_over_an_input(pair):
    import glmc

    a_dir, b_dir = pair
    before = _tree(b_dir)
    a, b = glmc.load_model(a_dir), glmc.load_model(b_dir)
    al = glmc.align(a, b, iterations=1, progress=False)
    with pytest.raises(ValueError, match="is the input"):
        al.save(b_dir, overwrite=True)
    with pytest.raises(ValueError, match="lies inside the input"):
        glmc.save_model(a, a_dir / "copy", overwrite=True)
    assert _tree(b_dir) == before and not (a_dir / "copy").exists()


def test_a_refused_output_leaves_no_folder_made_for_it(pair, tmp_path):
    a, _ = pair
    deep = tmp_path / "new" / "deeper" / "out"
    proc = subprocess.run([str(GLMC), "align", a, tmp_path / "absent-model-dir", "--out", deep], capture_output=True,
                          text=True, env=ENV, timeout=120)
    assert proc.returncode == 2 and not (tmp_path / "new").exists()
    tiny_gpt2(n_layer=2, n_embd=16, n_head=2, vocab=40).save_pretrained(tmp_path / "deep")
    proc = subprocess.run([str(GLMC), "align", a, tmp_path / "deep", "--out", deep], capture_output=True, text=True,
                          env=ENV, timeout=120)  # refused after the output's lock was taken
    assert proc.returncode == 1 and "models differ in depth" in proc.stderr
    assert not (tmp_path / "new").exists()
