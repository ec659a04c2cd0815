"""Rows modules of table-added panels: ``part(source) -> immutable plain data`` (docs/extending.md)."""
