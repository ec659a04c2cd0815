"""One module per dashboard panel: the plain data (rows, gauges) that panel shows, built the
same way from a live source or a capture. The widget of the same name in
:mod:`tpmtop.tui.widgets` only draws it. No Textual here."""
