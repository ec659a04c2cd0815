"""The dashboard (``tpmtop`` without a subcommand). The only package that imports Textual.

It is one consumer of the headless core: its data comes from :mod:`tpmtop.sources` (live,
replay, passive) and what the panels show is built by :mod:`tpmtop.viewmodel.rows`.
:mod:`tpmtop.tui.actions` and :mod:`tpmtop.tui.themes` are plain Python (no Textual);
``app``, ``screens/`` and ``widgets/`` are the Textual side.
"""
