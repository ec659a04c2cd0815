"""The dashboard (``tpmtop`` without a subcommand). The only package that imports Textual.

It is one consumer of the headless core (transport, recorder, session engine, captures):
:mod:`tpmtop.tui.live`, :mod:`tpmtop.tui.replay`, :mod:`tpmtop.tui.model`,
:mod:`tpmtop.tui.sysfs`, :mod:`tpmtop.tui.actions` and :mod:`tpmtop.tui.themes` are plain
Python (no Textual) so they can be tested and reused without a terminal; ``app``,
``screens/`` and ``widgets/`` are the Textual side.
"""
