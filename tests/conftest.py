"""Fixtures every room uses. Every TPM here is a real swtpm process; nothing is mocked.

The helpers the tests import (run_tpmtop, TcpSwtpm, the capture builders, the paths of the
data folders) are modules of tests/helpers/; each room's own fixtures are in its conftest.py.
"""

from __future__ import annotations

import os

import pytest

# The helpers assert too (check_trace, the capture builders, the process waits): rewrite their
# asserts as pytest does a test module's, so a failure inside one shows the values.
pytest.register_assert_rewrite("tests.helpers")

from tests.helpers.captures import BenchCaptures  # noqa: E402
from tests.helpers.processes import TcpSwtpm  # noqa: E402
from tpmtop.connect import open_tpm  # noqa: E402


@pytest.fixture
def tpm():
    """A fresh private swtpm (clean state) with an instrumented connection."""
    conn = open_tpm(sim=True)
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def tcp_swtpm():
    s = TcpSwtpm()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def bench_captures(tmp_path_factory) -> BenchCaptures:
    """The bench captures of tests/helpers/captures.py (BENCH_KINDS), each made once for the
    whole run: ``bench_captures.copy(kind, tmp_path)`` gives a test its own copy. Under
    pytest-xdist every worker's base temp is a child of one directory made for this run, and
    the workers share the captures there; alone, the run's own base temp holds them."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    where = root / "bench-captures"
    where.mkdir(exist_ok=True)
    return BenchCaptures(where)

