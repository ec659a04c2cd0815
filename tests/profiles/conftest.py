"""The profiles room: tpmtop.profile/1 (schema, sampling, provenance), `tpmtop profile show`
and profiles applied to a real swtpm. Fixtures from tests/conftest.py; none of its own."""
