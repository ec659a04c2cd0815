"""The decode corpus: real traffic to a real swtpm (tpm2-tools through tpm2-tss's pcap: TCTI,
tpmtop's own workloads in all four modes with both engines), recorded once. Every command and
response decodes fully, agrees with tpmstream's decoder field by field, and with tshark's
TPM 2.0 dissector on command codes, handles, sessions and response codes."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.decode_peers import tpmstream_fields, tpmtop_fields, tshark_frames
from tpmtop import decode
from tpmtop.tpm import names

pytestmark = pytest.mark.skipif(not any(Path("/usr/lib").glob("*/libtss2-tcti-pcap.so*")),
                                reason="no tpm2-tss pcap TCTI (scripts/bootstrap.sh --test installs it)")

# What the issue asks the corpus to hold (tpm2-tools' commands and tpmtop's workloads).
EXPECTED = {"CreatePrimary", "Create", "Load", "Sign", "VerifySignature", "HMAC", "GetRandom", "PCR_Read",
            "PCR_Extend", "NV_DefineSpace", "NV_Write", "NV_Read", "StartAuthSession", "PolicyPCR",
            "ContextSave", "ContextLoad", "FlushContext"}

# tshark 4.0's packet-tpm20.c, where it and the wire disagree (the peer's, not tpmtop's):
# it gives NV_Read one handle (Part 3 §31.13 has authHandle and nvIndex), so it reads the
# authorization area 4 bytes early; handle-area session handles (a policy command's
# policySession) it labels TPMI_SH_AUTH_SESSION, like authorization sessions.
TSHARK_WRONG_HANDLE_COUNT = {0x14E: "NV_Read"}


@pytest.fixture
def corpus(decode_corpus):
    return decode_corpus


def _decoded(pairs):
    return [decode.decode(c, r) for c, r in pairs]


def test_corpus_decodes_fully_and_agrees_with_tpmstream(corpus):
    _, _, pairs = corpus
    seen = Counter()
    parts = 0
    for (c, r), d in zip(pairs, _decoded(pairs), strict=True):
        seen[names.cc_short(d.command.cc)] += 1
        for part in (d.command, d.response):
            assert part is not None and part.complete, (c.hex(), r.hex(), part.stopped, part.trailing)
            parts += 1
        # tpmstream's own decoder on the same bytes: the same leaves, the same values
        enc = any(s.find(f"{s.path}.sessionAttributes").value & 0x40 for s in d.command.sessions)
        theirs, _ = tpmstream_fields(c)
        assert tpmtop_fields(d.command) == theirs, c.hex()
        theirs, _ = tpmstream_fields(r, d.command.cc, enc)
        assert tpmtop_fields(d.response) == theirs, (c.hex(), r.hex())
    assert EXPECTED <= set(seen), EXPECTED - set(seen)
    assert parts == 2 * len(pairs) and len(pairs) > 300


def test_corpus_agrees_with_tshark(corpus):
    """Command code, handles, session handles and attributes, response code, as tshark's
    TPM 2.0 dissector reads the tpm2-tools pcap."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (scripts/bootstrap.sh --test installs it)")
    pcap, n, pairs = corpus
    rows = tshark_frames(pcap)
    assert len(rows) == 2 * n
    attrs = (("tpm.auth_attribs_cont", 0x01), ("tpm.auth_attribs_decrypt", 0x20), ("tpm.auth_attribs_encrypt", 0x40))
    checked = Counter()
    for d, q, a in zip(_decoded(pairs[:n]), rows[0::2], rows[1::2], strict=True):
        cmd, rsp = d.command, d.response
        assert int(q["tpm.req.cc"][0], 16) == cmd.cc
        assert int(a["tpm.resp.rc"][0], 16) == rsp.rc
        checked["cc+rc"] += 1
        if cmd.cc in TSHARK_WRONG_HANDLE_COUNT:
            continue
        handle_sessions = [h.value for h in cmd.handles if h.type.startswith("TPMI_SH")]
        others = sorted(h.value for h in cmd.handles if not h.type.startswith("TPMI_SH"))
        assert q["handles"] == others, (names.cc_short(cmd.cc), q["handles"], others)
        ours = [s.fields[0].value for s in cmd.sessions]
        assert [int(x, 16) for x in q["tpm.handle.TPMI_SH_AUTH_SESSION"]] == handle_sessions + ours
        for key, bit in attrs:
            assert [int(x) for x in q[key]] == [int(bool(s.fields[2].value & bit)) for s in cmd.sessions]
            assert [int(x) for x in a[key]] == [int(bool(s.fields[1].value & bit)) for s in rsp.sessions]
        if a["handles"]:
            assert a["handles"] == sorted(h.value for h in rsp.handles)
        checked["handles+sessions"] += 1
    assert checked["handles+sessions"] > 0.9 * n


def test_import_and_replay_decode_option(corpus, tmp_path):
    """`tpmtop import --decode` lists every command decoded; `replay --decode` puts the same
    text in the stream's handles column."""
    from tests.helpers.processes import run_tpmtop
    from tpmtop.sources.replay import ReplaySource, load

    pcap, n, _ = corpus
    r = run_tpmtop("import", str(pcap), "-o", str(tmp_path / "c.json"), "--decode")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()
    assert len(rows) == 1 + n
    assert any("PCR_Extend" in x and "pcrHandle=PCR 16 digests=TPML_DIGEST_VALUES[1]" in x for x in rows)
    assert any("GetRandom" in x and "bytesRequested=8" in x for x in rows)
    assert any("NV_Write" in x and "nvIndex=" in x and "offset=0" in x for x in rows)
    r = run_tpmtop("import", str(pcap), "-o", "-", "--decode")
    assert r.returncode == 2 and r.stdout == ""
    from tpmtop.viewmodel.rows.stream import captured_rows

    stream = captured_rows(ReplaySource(load(str(pcap)), str(pcap), decode=True).captured_stream())
    assert any(row.command == "GetRandom" and row.handles == "bytesRequested=8" for row in stream)
    plain = captured_rows(ReplaySource(load(str(pcap)), str(pcap)).captured_stream())
    assert not any("bytesRequested" in row.handles for row in plain)
