"""Textual's Footer, recomposed only when what it shows changed.

Textual's Footer rebuilds all its keys (a dozen widgets: mount, layout, render) whenever the
screen's bindings may have changed — on every focus change, and on every ``refresh_bindings``.
Most of those change nothing visible here (a DataTable's bindings are hidden), yet measured
with benchmarks/ui_load.py the rebuild and the relayout it forces were most of the time a
focus key (``1``–``6``) took to reach the screen. So: compare, and skip when nothing differs.
"""

from __future__ import annotations

from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from tpmtop.tui.actions import OPTIONAL_IN_FOOTER


class TpmtopFooter(Footer):
    """Keys that are not essential carry ``-optional``: the stylesheet hides them on a narrow
    screen so that Help and Quit always show (at 80 columns the footer used to end before them)."""

    _shown: tuple | None = None

    def compose(self):
        for widget in super().compose():
            if isinstance(widget, FooterKey) and widget.action in OPTIONAL_IN_FOOTER:
                widget.add_class("-optional")
            yield widget

    def _signature(self, screen) -> tuple:
        return tuple((b.key, b.action, b.description, enabled, tooltip)
                     for _, b, enabled, tooltip in screen.active_bindings.values() if b.show)

    def bindings_changed(self, screen) -> None:
        if self.is_attached and screen is self.screen and screen.app.app_focus:
            sig = self._signature(screen)
            if sig == self._shown and self._bindings_ready:
                return
            self._shown = sig
        super().bindings_changed(screen)
