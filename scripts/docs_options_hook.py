"""MkDocs hook: `<!-- options: ClassName -->` in a page becomes that options class's table of fields (name, type,
default, help), generated from glmc/options.py, so the documentation never restates a default by hand."""

from __future__ import annotations

import re
import typing

MARKER = re.compile(r"<!-- options: (\w+) -->")


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


def on_page_markdown(markdown: str, **kwargs) -> str:
    return MARKER.sub(lambda m: _table(m.group(1)), markdown)
