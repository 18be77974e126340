"""One self-contained HTML page from glmc results: `glmc report RESULTS… -o report.html`.

Reads `glmc barrier --json` files (glmc.barrier/1: curves, standard errors, decompositions), `glmc barrier` files
of three or more models (glmc.simplex/1: their table) and sweeps (glmc.sweep/1: a sweep.json, or the sweep
directory holding it). Every figure is drawn here with matplotlib and embedded as a PNG data URI, and the page
has no script, style sheet or font from elsewhere: it reads the same offline. A small inline script marks each
figure the browser decoded ("N of N figures drawn"), which is what the headless-browser test reads.
"""

from __future__ import annotations

import base64
import html
import json
import tempfile
from pathlib import Path

from glmc.errors import BadOption
from glmc.experiments.plots import plot_curves, plot_decompositions
from glmc.experiments.sweep import Cell, plot_matrix, plot_steps
from glmc.symmetry.parts import ROLE_LABELS

CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;
color:#222;padding:0 1em}h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.85em}td,th{border:1px solid #ddd;padding:.25em .6em;
text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}img{max-width:100%;
border:1px solid #eee;margin:.5em 0}.note{color:#555;font-size:.9em}code{background:#f6f6f6;padding:0 .2em}"""
SCRIPT = """window.addEventListener('load',function(){var im=document.images,n=0;for(var i=0;i<im.length;i++)
{if(im[i].complete&&im[i].naturalWidth>0){im[i].setAttribute('data-drawn','yes');n++}}
document.getElementById('drawn').textContent=n+' of '+im.length+' figures drawn';});"""


def load_result(path) -> tuple[str, dict]:
    """(schema, data) of a results file or a sweep directory; refuses anything else by name."""
    p = Path(path)
    if p.is_dir():
        if not (p / "sweep.json").is_file():
            raise BadOption(f"{p} is a directory without sweep.json; give a glmc results JSON or a sweep directory")
        p = p / "sweep.json"
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise BadOption(f"{p} is not JSON ({e}); give what `glmc barrier --json` or `glmc sweep` wrote") from None
    schema = data.get("schema", "") if isinstance(data, dict) else ""
    if not schema.startswith(("glmc.barrier/", "glmc.simplex/", "glmc.sweep/")):
        raise BadOption(f"{p} is not a glmc barrier, simplex or sweep result (schema {schema or 'missing'!r})")
    return schema.split("/")[0], data


def build_report(paths, title: str = "glmc report") -> str:
    """The HTML text of the report on `paths` (results files or sweep directories), in the order given."""
    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(paths):
            kind, data = load_result(path)
            draw = {"glmc.barrier": _barrier, "glmc.simplex": _simplex, "glmc.sweep": _sweep}[kind]
            sections.append(draw(data, Path(path), Path(tmp), i) + provenance_html(data.get("provenance")))
    figures = sum(s.count("<img ") for s in sections)
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>"
            f"<p class='note'>{len(paths)} result file(s); <span id='drawn'>{figures} figures</span>.</p>"
            + "".join(sections) + f"<script>{SCRIPT}</script></body></html>\n")


def _e(x) -> str:
    return html.escape(str(x))


def _num(x, digits: int = 4) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return _e(x)


def _table(header: list, rows: list[list]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _image(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<img alt='{_e(alt)}' src='data:image/png;base64,{data}'>"


def _barrier(data: dict, source: Path, tmp: Path, i: int) -> str:
    results = data["results"]
    models = data.get("models", ["A", "B"])
    first = next(iter(results.values()))
    rows = []
    for method, r in results.items():
        rows.append([_e(method), _num(r["loss_endpoints"][0]), _num(r["loss_endpoints"][1]),
                     _num(r["loss_barrier"]), _num(r.get("loss_barrier_se")), _num(r["loss_barrier_lambda"], 2),
                     _num(r["loss_barrier_mean"]), _num(r.get("loss_barrier_mean_se")),
                     _num(100 * r["acc_drop"], 2), _num(None if r.get("acc_drop_se") is None else
                                                          100 * r["acc_drop_se"], 2),
                     _num(r.get("align_seconds"), 1)])
    out = [f"<h2>Barrier: {_e(models[0])} ↔ {_e(models[-1])}</h2>",
           f"<p class='note'>from <code>{_e(source)}</code>; split {_e(data.get('split', '?'))}, "
           f"{_e(first.get('n_batches', data.get('n_batches', '?')))} batches"
           + (f", {first['n_predictions']:,} {_e(first.get('unit', 'predictions'))}" if first.get("n_predictions")
              else "") + "; ± se: standard error over evaluation batches</p>",
           _table(["method", "loss A", "loss B", "barrier", "± se", "at λ", "barrier (mean)", "± se",
                   "acc drop %", "± se", "align s"], rows)]
    for method, r in results.items():
        if isinstance(r.get("over_seeds"), dict):
            s = r["over_seeds"]["loss_barrier"]
            out.append(f"<p class='note'>{_e(method)} over {s['n']} seeds: barrier {_num(s['mean'])} ± "
                       f"{_num(s['se'])} (se), sd {_num(s['sd'])}</p>")
    png = tmp / f"curves{i}.png"
    plot_curves(results, png, title=f"{models[0]} ↔ {models[-1]}")
    out.append(_image(png, "loss and accuracy along the path"))
    decs = {m: r for m, r in results.items() if r.get("decomposition")}
    if decs:
        out.append("<h3>Decomposition (canonical view)</h3>")
        mapped = {m: r for m, r in decs.items() if r["decomposition"]["parts"].get("cells")}
        if mapped:
            png = tmp / f"decomposition{i}.png"
            plot_decompositions(mapped, png, title="where the barrier lives")
            out.append(_image(png, "decomposition heat maps"))
        for method, r in decs.items():
            out.append(f"<h4>{_e(method)}</h4>" + _decomposition_table(r["decomposition"]))
    return "".join(out)


def provenance_html(p: dict | None) -> str:
    """Where a result came from (glmc/provenance.py), as a small table; a note when the file predates it."""
    if not p:
        return "<p class='note'>provenance: not recorded (a file written before glmc recorded it)</p>"
    code = p.get("code")
    where = "an installed glmc (no checkout)" if not code else \
        f"commit <code>{_e(code['commit'])}</code>" + (" <b>with uncommitted changes</b>" if code["dirty"] else
                                                       " (clean tree)")
    versions = ", ".join(f"{k} {v}" for k, v in (p.get("versions") or {}).items())
    device = p.get("device") or {}
    data = p.get("data") or {}
    spec = data.get("spec")
    spec = spec.get("source", spec) if isinstance(spec, dict) else spec
    digest = data.get("batches_sha256")
    rows = [["glmc", f"{_e(p.get('glmc'))}, {where}"], ["versions", _e(versions)],
            ["device", _e(f"{device.get('type')} ({device.get('name')}, {device.get('threads')} threads)")],
            ["created", _e(p.get("created"))], ["seeds", _e(p.get("seeds"))],
            ["data", _e(spec) + (f"; batches sha256 <code>{_e(digest[:16])}</code>" if digest else "")
             + "".join(f"; {_e(f['path'])} <code>{_e(f['sha256'][:16])}</code>" for f in data.get("files", []))]]
    for m in p.get("models") or []:
        prints = [w["fingerprint"][:16] for w in m.get("weights", [])] or [m.get("fingerprint", "")[:16]]
        rows.append(["model", f"{_e(m.get('path') or m.get('class'))} <code>{_e(' '.join(prints))}</code>"])
    if p.get("command"):
        rows.append(["command", f"<code>{_e(' '.join(map(str, p['command'])))}</code>"])
    rows.append(["options", f"<code>{_e(json.dumps(p.get('options'), default=str))}</code>"])
    return "<h3>Provenance</h3>" + _table(["", "value"], rows)


def _decomposition_table(d: dict) -> str:
    rows = []
    for grouping in ("roles", "layers", "cells"):
        for name, p in d["parts"].get(grouping, {}).items():
            o, a = p["only"], p["all_but"]
            label = ROLE_LABELS.get(name, name) if grouping == "roles" else name
            rows.append([_e(grouping), _e(label), f"{p['parameters']:,}"]
                        + [x for v in (o, a) for x in (_num(v.get("peak_excess")), _num(v.get("peak_lambda"), 2),
                                                       _num(v["barrier"]), _num(v["lambda"], 2), _num(v["end_loss"]))])
    whole = d["whole"]
    return (f"<p class='note'>whole path: barrier {_num(whole['barrier'])} at λ = {_num(whole['lambda'], 2)}; "
            f"all parts together reproduce it to {d['all_parts_max_abs_diff']:.1e}</p>"
            + "<p class='note'>peak: excess over the whole path's chord; barrier: over the partial path's own chord"
            "</p>" + _table(["grouping", "part", "parameters", "only: peak", "at λ", "barrier", "at λ", "L(1)",
                             "all but: peak", "at λ", "barrier", "at λ", "L(1)"], rows))


def _simplex(data: dict, source: Path, tmp: Path, i: int) -> str:
    rows = [[_e(m), _num(r["barrier"]), _num(r["centre_excess"]), _num(r.get("align_seconds"), 1)]
            for m, r in data["results"].items()]
    return (f"<h2>Simplex of {len(data.get('models', []))} models</h2><p class='note'>from <code>{_e(source)}"
            "</code></p>" + _table(["method", "barrier", "centre excess", "align s"], rows))


def _sweep(data: dict, source: Path, tmp: Path, i: int) -> str:
    rows = data["rows"]
    ok = [r for r in rows if r["status"] == "ok"]
    out = [f"<h2>Sweep ({_e(data['kind'])}): {len(rows)} cells</h2>",
           f"<p class='note'>from <code>{_e(source)}</code>; {data.get('failed', 0)} failed</p>"]
    if ok and data["kind"] == "checkpoints":
        png = tmp / f"sweep{i}.png"
        plot_steps(ok, png, title="barrier along training")
        out.append(_image(png, "barrier against training step"))
    elif ok:
        names = sorted({n for r in ok for n in r["pair"].split("~", 1)})
        cells = [Cell(r["pair"], r["model_a"], r["model_b"], r["method"], r["step"],
                      names.index(r["pair"].split("~", 1)[0]), names.index(r["pair"].split("~", 1)[1])) for r in ok]
        png = tmp / f"sweep{i}.png"
        plot_matrix(ok, cells, png, title="barrier between seeds")
        out.append(_image(png, "barrier matrix"))
    cols = ["pair", "step", "method", "status", "loss_barrier", "loss_barrier_se", "loss_barrier_mean", "acc_drop",
            "n_predictions", "wall_seconds", "peak_rss_mb"]
    out.append(_table(cols, [[_num(r.get(c)) for c in cols] for r in rows]))
    return "".join(out)
