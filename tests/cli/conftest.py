"""The CLI room: every subcommand as a user runs it (`python -m tpmtop` from this tree, through
tests.helpers.processes.run_tpmtop): usage errors, hostile files, output files and devices,
`tpmtop handles`/`flush`. Fixtures from tests/conftest.py (tcp_swtpm); none of its own."""
