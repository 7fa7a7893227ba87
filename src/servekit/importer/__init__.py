"""Bringing a folder in the source convention into the catalog (facts -> layout)."""
