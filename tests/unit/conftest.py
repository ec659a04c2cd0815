"""The unit room: in-process checks with no TPM and no subprocess of tpmtop itself: atomic
writes, the parsers under hypothesis, the closed sets and registries, the source contract, and
the project's own rules (ruff, mypy, lint-imports). No fixtures of its own."""
