"""MkDocs hook: `<!-- options: ClassName -->` in a page becomes that options class's table of fields (name, type,
default, help), generated from glmc/options.py, and `<!-- methods -->` the table of alignment methods, generated
from their records (glmc/methods.py), so the documentation never restates a default or a method by hand."""

from __future__ import annotations

import re
import typing

MARKER = re.compile(r"<!-- options: (\w+) -->")
METHODS = "<!-- methods -->"


def _table(name: str) -> str:
    import glmc.options as o

    cls = getattr(o, name)
    hints = typing.get_type_hints(cls)
    rows = ["| Option | Type | Default | Meaning |", "|---|---|---|---|"]
    for f in cls.fields():
        kind = o.type_name(hints[f.name]).replace(" | ", " or ")
        text = o.help_text(f).replace("|", "\\|")
        rows.append(f"| `{f.name}` | `{kind}` | `{f.default!r}` | {text} |")
    return "\n".join(rows)


def _methods() -> str:
    from glmc.methods import methods

    def yes(flag) -> str:
        return "yes" if flag else ""

    rows = ["| Method | What it does | Options | Data | Stochastic | Merge | 3+ models |",
            "|---|---|---|---|---|---|---|"]
    for m in methods().values():
        options = f"`{m.options.__name__}`" if m.options else ""
        preset = ", ".join(f"`{k}={v!r}`" for k, v in m.preset.items())
        rows.append(f"| `{m.name}` | {m.summary}{f' ({preset})' if preset else ''} | {options} | {m.data} | "
                    f"{yes(m.stochastic)} | {yes(m.merge)} | {yes(m.simplex)} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs) -> str:
    markdown = markdown.replace(METHODS, _methods()) if METHODS in markdown else markdown
    return MARKER.sub(lambda m: _table(m.group(1)), markdown)
