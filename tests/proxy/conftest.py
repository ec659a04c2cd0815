"""The proxy room: `tpmtop proxy`, `tpmtop run` and `tpmtop clients` with real swtpm, tpm2-tools,
tpm2-abrmd and sockets. The Proxy helper is in tests/helpers/proxy.py; tcp_swtpm is in
tests/conftest.py."""

from __future__ import annotations

import pytest

from tests.helpers.proxy import Proxy


@pytest.fixture
def proxy_factory(tcp_swtpm, tmp_path):
    made = []

    def make(protocol="swtpm", extra=()):
        p = Proxy(tcp_swtpm.tcti, protocol, tmp_path, extra)
        made.append(p)
        return p

    yield make
    for p in made:
        p.kill()
