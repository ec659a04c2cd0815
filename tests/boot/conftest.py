"""The boot room: `tpmtop boot` on fixture trees (tests/fixtures/boot/<system>/ looks like / of
that system), ftrace/bpftrace imports and the projection arithmetic. Data through
tests.helpers.paths; no fixtures of its own."""
