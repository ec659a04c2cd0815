"""Rows modules of the panels added through the panel table (tpmtop/tui/panels.py): each a
``part(source)`` that returns immutable plain data for its widget's ``show_part``."""
