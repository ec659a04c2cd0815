"""`tpmtop decode`: every command tpmtop's own workloads send, recorded on a real swtpm,
decodes fully; a garbled buffer decodes partially and says where it stopped."""

from __future__ import annotations

import json

import pytest
from conftest import run_tpmtop

from tpmtop.capture import load_capture
from tpmtop.tpm import decode


@pytest.fixture(scope="module")
def workload_buffers(tmp_path_factory):
    """(command, response) bytes of every command of every op × mode × engine, and of the
    dashboard's polls (identity, variable properties, handle lists) and a flush."""
    from tpmtop.connect import open_tpm
    from tpmtop.tpm.handles import list_handles
    from tpmtop.tpm.identity import read_identity, read_variable

    tmp = tmp_path_factory.mktemp("decode")
    pairs = []
    for op in ("extend", "get_random", "create_primary"):
        cap = tmp / f"{op}.json"
        r = run_tpmtop("bench", "--sim", "--op", op, "-n", "3", "--warmup", "1", "--batch", "3",
                       "--events", "--json", str(cap), "-q", timeout=600)
        assert r.returncode == 0, r.stderr
        for e in load_capture(cap)["events"]:
            pairs.append((bytes.fromhex(e["command_hex"]), bytes.fromhex(e["response_hex"])))
    conn = open_tpm(sim=True)
    try:
        read_identity(conn.transport)
        read_variable(conn.transport)
        list_handles(conn.transport)
        events = conn.recorder.events()
    finally:
        conn.close()
    pairs += [(bytes(e.command), bytes(e.response)) for e in events if e.command is not None]
    return pairs


def test_every_workload_command_decodes_fully(workload_buffers):
    """All command codes tpmtop sends: header, handles, sessions and parameters, both ways."""
    seen = set()
    for cmd, rsp in workload_buffers:
        d = decode.decode(cmd, rsp)
        assert d.complete, (cmd.hex(), rsp.hex(), d.command.stopped, d.response.stopped)
        assert d.command.trailing == 0 and d.response.trailing == 0
        seen.add(d.command.cc)
        if d.command.tag == 0x8002:
            assert d.command.sessions and all(s["nonce_size"] in (0, 16, 32) for s in d.command.sessions)
    # the kernel's story is in there: extend, the 6.10 set-up, save/load, random, primaries
    for cc in (0x182, 0x176, 0x161, 0x162, 0x165, 0x17B, 0x131, 0x17A):
        assert cc in seen, hex(cc)


def test_session_attributes_and_names_in_a_per_command_extend(workload_buffers):
    """The per-command PCR_Extend: PCR 16 by name, one session with continueSession off."""
    ext = [decode.decode(c, r) for c, r in workload_buffers if c[6:10] == b"\x00\x00\x01\x82"]
    assert ext
    names = {d.command.handles[0]["name"] for d in ext}
    assert names == {"PCR 16"}
    hmac = [d for d in ext if d.command.sessions[0]["handle"].startswith("0x02")]
    assert hmac, "no HMAC-session extend recorded"
    s = hmac[0].command.sessions[0]
    assert s["name"].startswith("hmac-session") and s["nonce_size"] == 32 and s["hmac_size"] == 32
    pw = [d for d in ext if d.command.sessions[0]["handle"] == "0x40000009"]
    assert pw and pw[0].command.sessions[0]["name"] == "TPM_RS_PW"
    # the digest list is decoded to its algorithm and value
    digests = ext[0].command.parameters[0]["value"]
    assert digests[0]["hashAlg"] == "sha256 (0x000b)" and len(digests[0]["digest"]) == 64


def test_cli_decodes_a_command_and_response_pair(workload_buffers):
    cmd, rsp = next((c, r) for c, r in workload_buffers if c[6:10] == b"\x00\x00\x01\x7b")
    r = run_tpmtop("decode", cmd.hex(), rsp.hex())
    assert r.returncode == 0, r.stderr
    assert "TPM2_CC_GetRandom (0x0000017b)" in r.stdout
    assert "rc 0x000 success" in r.stdout
    assert "decoded fully" in r.stdout and "00000000  80 0" in r.stdout
    j = run_tpmtop("decode", cmd.hex(), rsp.hex(), "--json")
    d = json.loads(j.stdout)
    assert d["complete"] and d["command"]["command"] == "TPM2_CC_GetRandom"
    assert d["hex"]["response"] == rsp.hex()


def test_garbled_buffer_gives_a_partial_decode_saying_where(workload_buffers, tmp_path):
    """A PCR_Extend cut inside its digest list: handles and session decoded, then the stop."""
    cmd = next(c for c, _ in workload_buffers if c[6:10] == b"\x00\x00\x01\x82")
    cut = cmd[:len(cmd) - 20]
    f = tmp_path / "cut.bin"
    f.write_bytes(cut)
    r = run_tpmtop("decode", str(f), "--json")
    assert r.returncode == 2
    d = json.loads(r.stdout)
    c = d["command"]
    assert not d["complete"] and c["handles"][0]["name"] == "PCR 16" and c["sessions"]
    assert c["stopped"]["offset"] >= 10 + 4
    stderr = r.stderr.strip().splitlines()
    assert len(stderr) == 1 and stderr[0].startswith("tpmtop: partial decode: stopped at byte")
    # a wrong tag stops at byte 0
    bad = b"\x12\x34" + cmd[2:]
    p = decode.decode_command(bad)
    assert p.stopped.offset == 0 and "tag" in p.stopped.reading


def test_lone_response_needs_the_command_code():
    rsp = "800100000014000000000008dbecfe91abd2b12f"
    r = run_tpmtop("decode", rsp)
    assert r.returncode == 2 and "--cc" in r.stderr
    r = run_tpmtop("decode", "--cc", "GetRandom", rsp)
    assert r.returncode == 0, r.stderr
    assert "dbecfe91abd2b12f" in r.stdout


def test_error_response_is_decoded_with_its_meaning():
    """A 0x902 answer: the response code, its tpm2-tss wording and what to do about it."""
    d = decode.decode(bytes.fromhex("80010000000c0000017b0008"), bytes.fromhex("80010000000a00000902"))
    text = decode.render(d)
    assert "rc 0x902 tpm:warn(2.0): out of memory for object contexts" in text and "tpmtop handles" in text


def test_event_of_a_capture_decodes(tmp_path):
    """`tpmtop decode CAPTURE --event N`: the bytes a bench --events capture kept."""
    cap = tmp_path / "b.json"
    r = run_tpmtop("bench", "--sim", "--op", "get_random", "--modes", "reuse", "--engine", "native", "-n", "2",
                   "--warmup", "0", "--events", "--json", str(cap), "-q", timeout=300)
    assert r.returncode == 0, r.stderr
    events = load_capture(cap)["events"]
    n = next(i for i, e in enumerate(events) if e["command"] == "TPM2_CC_GetRandom")
    r = run_tpmtop("decode", str(cap), "--event", str(n), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["complete"] and d["hex"]["command"] == events[n]["command_hex"]
    assert d["command"]["sessions"][0]["attrs"] == 0x41  # encrypt|continueSession, as the kernel's
    r = run_tpmtop("decode", str(cap), "--event", str(len(events)))
    assert r.returncode == 2 and f"0..{len(events) - 1}" in r.stderr


# -- hostile input: never raises, always says where it stopped ------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_fuzz_parsers import _mutate  # noqa: E402  (the same edits as the wire decoders' fuzzing)

_SET = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
_EDITS = st.lists(st.tuples(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]),
                            st.integers(0, 4096), st.integers(0, 255)), min_size=1, max_size=4)


def _check(d) -> None:
    json.dumps(d.to_json())
    decode.render(d)
    for p in (d.command, d.response):
        if p is not None and not p.complete:
            assert 0 <= p.stopped.offset <= max(p.size, 10) and p.stopped.reading


@settings(max_examples=300, **_SET)
@given(data=st.data(), edits=_EDITS)
def test_mutated_real_buffers_never_raise(workload_buffers, data, edits):
    cmd, rsp = data.draw(st.sampled_from(workload_buffers))
    _check(decode.decode(_mutate(cmd, edits), _mutate(rsp, edits)))


@settings(max_examples=300, **_SET)
@given(cmd=st.binary(max_size=200), rsp=st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(cmd, rsp):
    _check(decode.decode(cmd, rsp))


def test_replay_keeps_the_bytes_a_capture_carries(tmp_path):
    """Replay's loader (the typed fast path) must not drop command_hex/response_hex: Enter on a
    replayed row decodes from them."""
    from tpmtop.sources.replay import load

    cap = tmp_path / "c.json"
    r = run_tpmtop("bench", "--sim", "--modes", "reuse", "--engine", "native", "-n", "3", "--warmup", "1",
                   "--events", "--json", str(cap), "-q", timeout=300)
    assert r.returncode == 0, r.stderr
    with_bytes = [e for e in load_capture(cap)["events"] if "command_hex" in e]
    assert with_bytes
    replayed = load(cap)["events"]
    assert [e.get("command_hex") for e in replayed[-len(with_bytes):]] == [e["command_hex"] for e in with_bytes]
