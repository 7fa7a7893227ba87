"""The jinja2 environment for reports and the catalog site (templates are package data).

HTML templates autoescape; Markdown templates escape table cells with the
``cell`` filter. Undefined names are errors, so a template cannot silently
print an empty figure.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from servekit.vocabulary import atomic_write_text, markdown_cell


def md_link(text: object, href: str | None) -> str:
    """``[text](href)``, or the bare cell text when there is no evidence file."""
    cell = markdown_cell(text)
    if not href:
        return cell
    return f"[{cell.replace('[', '(').replace(']', ')')}]({href})"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("servekit.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "html.j2", "svg.j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["cell"] = markdown_cell
    env.filters["mdlink"] = md_link
    return env


def render_template(name: str, out: Path, **context: Any) -> Path:
    """Render template ``name`` to ``out`` atomically."""
    atomic_write_text(out, environment().get_template(name).render(**context))
    return out
