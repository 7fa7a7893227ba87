"""Markdown table cells: text from a check, a flag's help or a figure, made safe in a cell.

A ``|`` in a reason ("expected a|b") would split the cell and shift every column
after it; a newline would end the row. Every Markdown table servekit writes (release
tables, acceptance and benchmark sections, the docs' option tables, report
templates) passes its cells through :func:`markdown_cell`. Standard library only.
"""

from __future__ import annotations


def markdown_cell(text: object) -> str:
    """``text`` as one Markdown table cell: ``|`` escaped, line breaks made spaces."""
    return str(text).replace("|", "\\|").replace("\r\n", " ").replace("\n", " ")
