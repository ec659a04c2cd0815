"""`tpmtop decode`: field by field, with spec names, on real swtpm traffic (the session's decode
corpus: tpm2-tools and tpmtop's workloads); a garbled buffer decodes partially and says where
it stopped, the rest shown raw."""

from __future__ import annotations

import json

import pytest

from tests.helpers.processes import run_tpmtop
from tpmtop import decode
from tpmtop.capture import load_capture


@pytest.fixture
def workload_buffers(decode_corpus):
    return [(c, r) for c, r in decode_corpus[2] if r is not None]


def _pair(buffers, cc: int, sessions: bool | None = None):
    for c, r in buffers:
        if int.from_bytes(c[6:10], "big") == cc and int.from_bytes(r[6:10], "big") == 0 \
                and (sessions is None or (c[:2] == b"\x80\x02") == sessions):
            return c, r
    raise AssertionError(f"no 0x{cc:x} in the corpus")


def test_get_random_names_its_parameter():
    r = run_tpmtop("decode", "80010000000c0000017b0008", "--no-hex")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if "bytesRequested" in x)
    assert line.split()[:4] == ["10", "bytesRequested", "UINT16", "0008"] and line.split()[-1] == "8"
    d = json.loads(run_tpmtop("decode", "80010000000c0000017b0008", "--json").stdout)
    p = d["command"]["fields"][-1]["fields"][0]
    assert (p["name"], p["path"], p["type"], p["offset"], p["hex"], p["value"]) == \
        ("bytesRequested", "parameters.bytesRequested", "UINT16", 10, "0008", 8)


def test_create_primary_and_its_response_field_by_field(workload_buffers):
    """tpm2_createprimary's command and response: every parameter by its Part 3 name, every
    TPMA_OBJECT bit, the union members chosen by their selector."""
    cmd, rsp = _pair(workload_buffers, 0x131, sessions=True)
    d = decode.decode(cmd, rsp)
    assert d.complete
    c, r = d.command, d.response
    assert [p.name for p in c.parameters] == ["inSensitive", "inPublic", "outsideInfo", "creationPCR"]
    assert [p.name for p in r.handles] == ["objectHandle"]
    assert [p.name for p in r.parameters] == ["outPublic", "creationData", "creationHash", "creationTicket", "name"]
    attrs = c.field("parameters.inPublic.publicArea.objectAttributes")
    assert attrs.type == "TPMA_OBJECT"
    for bit in ("fixedTPM", "stClear", "fixedParent", "sensitiveDataOrigin", "userWithAuth", "adminWithPolicy",
                "noDA", "encryptedDuplication", "restricted", "decrypt", "sign_decrypt"):
        assert bit in attrs.bits
        assert attrs.bits[bit] == (1 if bit in attrs.text.split(" | ") else 0)
    assert attrs.bits["fixedTPM"] == 1 and attrs.value & 0x2
    # tpm2_createprimary -G ecc256: the union resolved by the type selector
    assert c.field("parameters.inPublic.publicArea.type").text == "TPM_ALG.ECC"
    assert c.field("parameters.inPublic.publicArea.parameters").type == "TPMU_PUBLIC_PARMS.eccDetail"
    assert c.field("parameters.inPublic.publicArea.parameters.eccDetail.curveID").text == "TPM_ECC_CURVE.NIST_P256"
    assert c.field("parameters.inSensitive.sensitive").type == "TPMS_SENSITIVE_CREATE"
    assert c.field("parameters.inSensitive.sensitive.userAuth.size").value == 0
    assert c.handles[0].text.endswith("TPM_RH.NULL")
    # offsets and bytes: each field's hex is the buffer at its offset
    for f in c.root.walk():
        if f.value is not None and isinstance(f.value, int):
            assert int.from_bytes(cmd[f.offset:f.offset + f.size], "big", signed=f.value < 0) == f.value
    text = decode.render(d, hexdump=False)
    for name in ("inSensitive", "inPublic", "outsideInfo", "creationPCR", "objectHandle", "outPublic",
                 "creationData", "creationHash", "creationTicket", "name", "fixedTPM | fixedParent"):
        assert name in text


def test_cli_decodes_a_command_and_response_pair(workload_buffers):
    cmd, rsp = _pair(workload_buffers, 0x17B)
    r = run_tpmtop("decode", cmd.hex(), rsp.hex())
    assert r.returncode == 0, r.stderr
    assert "TPM2_CC_GetRandom (0x0000017b)" in r.stdout
    assert "rc 0x000 success" in r.stdout
    assert "decoded fully" in r.stdout and "00000000  80 0" in r.stdout
    j = run_tpmtop("decode", cmd.hex(), rsp.hex(), "--json")
    d = json.loads(j.stdout)
    assert d["complete"] and d["command"]["command"] == "TPM2_CC_GetRandom"
    assert d["hex"]["response"] == rsp.hex() and d["schema"] == "tpmtop-decode/1"


def test_json_form_follows_its_schema(workload_buffers):
    import jsonschema

    from tpmtop.decode.schema import load_schema

    schema = load_schema()
    for c, r in workload_buffers[::7]:
        jsonschema.validate(decode.decode(c, r).to_json(), schema)
    jsonschema.validate(decode.decode(b"\x80\x01\x00\x00\x00\x20\x00\x00", None).to_json(), schema)


def test_garbled_buffer_gives_a_partial_decode_saying_where(workload_buffers, tmp_path):
    """A PCR_Extend cut inside its digest list: handles and session decoded, then the stop,
    the rest of the buffer raw."""
    cmd, _ = _pair(workload_buffers, 0x182, sessions=True)
    cut = cmd[:len(cmd) - 20]
    f = tmp_path / "cut.bin"
    f.write_bytes(cut)
    r = run_tpmtop("decode", str(f), "--json")
    assert r.returncode == 2
    d = json.loads(r.stdout)
    c = d["command"]
    assert not d["complete"]
    handles = next(x for x in c["fields"] if x["name"] == "handles")
    assert handles["fields"][0]["text"].endswith("PCR 16") or "PCR" in handles["fields"][0]["text"]
    assert c["stopped"]["offset"] >= 10 + 4 and c["stopped"]["reading"].startswith("parameters.digests")
    assert cut.hex().endswith(c["stopped"]["raw_hex"])
    stderr = r.stderr.strip().splitlines()
    assert len(stderr) == 1 and stderr[0].startswith("tpmtop: partial decode: stopped at byte")
    t = run_tpmtop("decode", str(f), "--no-hex")
    assert "not decoded (" in t.stdout and "raw:" in t.stdout
    # a wrong tag stops at byte 0
    bad = b"\x12\x34" + cmd[2:]
    p = decode.decode_command(bad)
    assert p.stopped.offset == 0 and "tag" in p.stopped.reading


def test_a_tpm2b_whose_size_lies_is_caught():
    """inSensitive says 6 bytes but its structure uses 4: the TPM2B size check names it."""
    body = bytes.fromhex("40000007" "00000009" "40000009" "0000" "00" "0000"
                         "0006" "0000" "0000" "0000" "0000" "0000" "0000000000")
    cmd = bytes.fromhex("8002") + (10 + len(body)).to_bytes(4, "big") + bytes.fromhex("00000131") + body
    p = decode.decode_command(cmd)
    assert not p.complete and p.stopped.reading == "parameters.inSensitive.sensitive"
    assert "says 6 bytes" in p.stopped.error


def test_lone_response_needs_the_command_code():
    rsp = "800100000014000000000008dbecfe91abd2b12f"
    r = run_tpmtop("decode", rsp)
    assert r.returncode == 2 and "--cc" in r.stderr
    r = run_tpmtop("decode", "--cc", "GetRandom", rsp)
    assert r.returncode == 0, r.stderr
    assert "dbecfe91abd2b12f" in r.stdout and "randomBytes" in r.stdout


def test_error_response_is_decoded_with_its_meaning():
    """A 0x902 answer: the response code, its tpm2-tss wording and what to do about it."""
    d = decode.decode(bytes.fromhex("80010000000c0000017b0008"), bytes.fromhex("80010000000a00000902"))
    text = decode.render(d)
    assert "rc 0x902 tpm:warn(2.0): out of memory for object contexts" in text and "tpmtop handles" in text


def test_event_of_a_capture_decodes(bench_captures, tmp_path):
    """`tpmtop decode --event N CAPTURE`: the bytes a bench --events capture kept."""
    cap = bench_captures.copy("get-random-reuse", tmp_path)
    events = load_capture(cap)["events"]
    n = next(i for i, e in enumerate(events) if e["command"] == "TPM2_CC_GetRandom")
    # the capture says a plaintext view was available (tpmtop's own session), and only that
    assert events[n]["plaintext_view"] is True
    assert all(isinstance(e.get("plaintext_view", False), bool) for e in events)
    r = run_tpmtop("decode", "--event", str(n), str(cap), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["complete"] and d["hex"]["command"] == events[n]["command_hex"]
    area = next(x for x in d["command"]["fields"] if x["name"] == "authorizationArea")
    attrs = area["fields"][0]["fields"][2]
    assert attrs["name"] == "sessionAttributes" and attrs["value"] == 0x41  # encrypt|continueSession
    assert attrs["bits"]["encrypt"] == 1 and attrs["bits"]["decrypt"] == 0
    rsp_param = next(x for x in d["response"]["fields"] if x["name"] == "parameters")["fields"][0]
    assert rsp_param["encrypted"]["session"].startswith("0x02")
    assert "encrypted by session 0x02" in rsp_param["note"]
    r = run_tpmtop("decode", str(cap), "--event", str(len(events)))
    assert r.returncode == 2 and f"0..{len(events) - 1}" in r.stderr


# -- hostile input: never raises, always says where it stopped ------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.helpers.mutations import _mutate  # noqa: E402  (the same edits as the wire decoders' fuzzing)

_SET = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
_EDITS = st.lists(st.tuples(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]),
                            st.integers(0, 4096), st.integers(0, 255)), min_size=1, max_size=4)


def _check(d) -> None:
    json.dumps(d.to_json())
    decode.render(d)
    for p in (d.command, d.response):
        if p is not None and p.stopped is not None:
            assert 0 <= p.stopped.offset <= max(p.size, 10) and p.stopped.reading
        if p is not None and not p.complete:
            assert p.stopped is not None or p.trailing


@settings(max_examples=300, **_SET)
@given(data=st.data(), edits=_EDITS)
def test_mutated_real_buffers_never_raise(workload_buffers, data, edits):
    cmd, rsp = data.draw(st.sampled_from(workload_buffers))
    _check(decode.decode(_mutate(cmd, edits), _mutate(rsp, edits)))


@settings(max_examples=300, **_SET)
@given(cmd=st.binary(max_size=200), rsp=st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(cmd, rsp):
    _check(decode.decode(cmd, rsp))


def test_replay_keeps_the_bytes_a_capture_carries(bench_captures, tmp_path):
    """Replay's loader (the typed fast path) must not drop command_hex/response_hex: Enter on a
    replayed row decodes from them."""
    from tpmtop.sources.replay import load

    cap = bench_captures.copy("reuse-warmup", tmp_path)
    with_bytes = [e for e in load_capture(cap)["events"] if "command_hex" in e]
    assert with_bytes
    replayed = load(cap)["events"]
    assert [e.get("command_hex") for e in replayed[-len(with_bytes):]] == [e["command_hex"] for e in with_bytes]
