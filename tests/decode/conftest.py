"""The decode room: `tpmtop decode`, its plaintext views, and the corpus of real traffic it is
held to against tpmstream and tshark."""

from __future__ import annotations

import pytest

from tests.helpers.processes import TcpSwtpm


@pytest.fixture(scope="session")
def decode_corpus(tmp_path_factory):
    """Real traffic recorded once per test session (tests/helpers/decode_corpus.py): the tpm2-tools
    pcap, how many pairs it holds, and every (command, response) of it and of tpmtop's
    workloads in all four modes."""
    from tests.helpers.decode_corpus import pairs_from, record_tools, record_workloads

    work = tmp_path_factory.mktemp("decode-corpus")
    s = TcpSwtpm()
    try:
        pcap, failed = record_tools(s.port, work)
        assert not failed, failed
        caps = record_workloads(s.port, work)
    finally:
        s.stop()
    pairs = pairs_from(pcap)
    tool_pairs = len(pairs)
    for c in caps:
        pairs += pairs_from(c)
    return pcap, tool_pairs, pairs
