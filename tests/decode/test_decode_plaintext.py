"""The plaintext of tpmtop's own encrypted parameters, against a real swtpm: what the native
engine encrypted (CreatePrimary's inSensitive, DECRYPT) and what it decrypted (GetRandom's
randomBytes, ENCRYPT) is what the decode shows; without the session's key it says why."""

from __future__ import annotations

import struct

from tests.helpers.processes import run_tpmtop
from tpmtop import decode
from tpmtop.decode.plaintext import provider, recorder_history
from tpmtop.sessions import livekeys, native
from tpmtop.sessions.engine import ATTR_CONTINUE, ATTR_DECRYPT, ATTR_ENCRYPT
from tpmtop.sessions.templates import TPM_RH_NULL


def _decoded(rec, cc):
    ev = next(e for e in rec.events() if e.cc == cc and e.sessions and e.sessions[0][0] >> 24 == 0x02)
    d = decode.decode(bytes(ev.command), bytes(ev.response), plaintext=provider(recorder_history(rec, ev.seq)))
    return ev, d


def test_plaintext_both_ways_equals_what_the_engine_sent_and_received(tpm):
    e = native.NativeEngine(tpm.transport)
    e.create_null_primary()
    key = e.load_null()
    s = e.start_session(key)
    e.flush(key)
    sent = native._create_primary_params()
    handle, _ = e.execute(native.CC_CREATE_PRIMARY, (TPM_RH_NULL,), struct.pack(">I", TPM_RH_NULL), sent, s,
                          ATTR_DECRYPT | ATTR_CONTINUE, rsp_handle=True)
    e.flush(handle)
    _, got = e.execute(native.CC_GET_RANDOM, (), b"", struct.pack(">H", 32), s, ATTR_ENCRYPT | ATTR_CONTINUE)
    e.end_session(s)

    ev, d = _decoded(tpm.recorder, native.CC_CREATE_PRIMARY)
    assert d.complete
    first = d.command.parameters[0]
    assert first.name == "inSensitive" and first.encrypted["session"] == f"0x{s.handle:08x}"
    assert first.note.startswith(f"encrypted by session 0x{s.handle:08x}, CFB")
    n = int.from_bytes(sent[:2], "big")
    assert first.encrypted["available"] and first.encrypted["plaintext"]["hex"] == sent[2:2 + n].hex()
    assert first.fields[1].value != sent[2:2 + n].hex()  # the wire carried ciphertext
    ptf = first.encrypted["plaintext"]["fields"][0]
    assert ptf["type"] == "TPMS_SENSITIVE_CREATE" and [f["name"] for f in ptf["fields"]] == ["userAuth", "data"]
    text = decode.render(d, hexdump=False)
    assert "plaintext (tpmtop holds this session's key): 00000000" in text

    _, d = _decoded(tpm.recorder, native.CC_GET_RANDOM)
    r = d.response.parameters[0]
    assert r.name == "randomBytes" and r.encrypted["available"]
    assert r.encrypted["plaintext"]["hex"] == got[2:].hex() != r.fields[1].value

    # the same bytes in another process (tpmtop decode): no key, and it says so
    r = run_tpmtop("decode", bytes(ev.command).hex(), bytes(ev.response).hex(), "--no-hex")
    assert r.returncode == 0, r.stderr
    assert "encrypted by session 0x02" in r.stdout
    assert "no plaintext view: a session's keys live only in the tpmtop process that ran it" in r.stdout
    assert "plaintext (" not in r.stdout
    # keys forgotten: the view says why, the ciphertext note stays
    livekeys.clear()
    _, d = _decoded(tpm.recorder, native.CC_CREATE_PRIMARY)
    enc = d.command.parameters[0].encrypted
    assert not enc["available"] and "not one of tpmtop's own" in enc["why"]
