"""The TPM room: the connection, the session engine, the owner thread, the private swtpm, faults,
signals and safety, each against real swtpm processes."""

from __future__ import annotations

import pytest

from tests.helpers.processes import BenchProcess
from tpmtop.connect import open_tpm


@pytest.fixture(scope="module")
def shared_tpm():
    """One swtpm for a module whose tests do not care about each other's state."""
    conn = open_tpm(sim=True)
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def bench():
    """bench(*args) -> BenchProcess; every one started is killed at the end of the test."""
    started: list[BenchProcess] = []

    def start(*args: str) -> BenchProcess:
        b = BenchProcess(*args)
        started.append(b)
        return b

    try:
        yield start
    finally:
        for b in started:
            b.kill()
