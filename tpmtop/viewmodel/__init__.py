"""The dashboard's view-model, between the sources (:mod:`tpmtop.sources`) and the screens
(:mod:`tpmtop.tui`): the state that outlives a frame, and the immutable frames themselves.
No Textual here (the import-linter layers contract in pyproject.toml says so)."""
