"""The instrumented transport: what it records, how it decodes, what it survives."""

import struct

import pytest

from tpmtop.recorder import Recorder
from tpmtop.sessions.modes import ENGINES, MODES, OPS
from tpmtop.sessions.workload import Workload
from tpmtop.stats import LatencyHistogram
from tpmtop.tpm import names, wire
from tpmtop.tpm.exchange import labelled
from tpmtop.tpm.handles import flush, list_handles
from tpmtop.tpm.identity import read_identity, read_variable


def test_every_command_tpmtop_issues_decodes(tpm):
    """Run every engine × mode × op plus info/handles/flush, then decode each recorded
    command both cheaply (the hot path) and fully (tpm2-pytss command_parser)."""
    read_identity(tpm.transport)
    read_variable(tpm.transport)
    wl = Workload(tpm)
    for engine in ENGINES:
        for mode in MODES:
            for op in OPS:
                wl.set(engine, mode, op)
                wl.run_one()
    wl.close()
    events = tpm.recorder.events()
    seen = {e.name for e in events}
    assert {"TPM2_CC_PCR_Extend", "TPM2_CC_GetRandom", "TPM2_CC_CreatePrimary", "TPM2_CC_ContextLoad",
            "TPM2_CC_ContextSave", "TPM2_CC_StartAuthSession", "TPM2_CC_FlushContext",
            "TPM2_CC_GetCapability"} <= seen
    for e in events:
        assert not e.garbled and e.rc == 0, (e.name, e.rc_text)
        info = wire.decode_command(e.command)
        assert info.cc == e.cc and len(info.handles) == wire.num_handles(e.cc)
        full = wire.full_decode(e.command, e.response)
        assert "command" in full and "command_error" not in full, (e.name, full)
    # Session attributes on the wire are what the mode says (get_random: encrypt|continue in reuse).
    reuse_random = [e for e in events if e.mode == "reuse" and e.name == "TPM2_CC_GetRandom"]
    assert reuse_random and all(e.sessions[0][1] == 0x41 for e in reuse_random)


@pytest.mark.parametrize("buf", [b"", b"\x80", b"\x80\x01\x00\x00\x00\x0c", b"\xff" * 40,
                                 struct.pack(">HII", 0x8002, 30, 0x182) + b"\x00\x00\x00\x10" + b"\xff\xff\xff\xff",
                                 struct.pack(">HII", 0x8001, 12, 0xDEADBEEF) + b"\0\0"])
def test_garbled_buffers_are_flagged_not_raised(buf):
    info = wire.decode_command(buf)
    assert info.garbled or info.cc == 0xDEADBEEF
    r = wire.decode_response(buf, info.cc)
    assert r.garbled or r.size == len(buf)


def test_garbled_command_on_the_wire_is_recorded(tpm):
    bad = struct.pack(">HII", 0x8001, 99, 0x17B) + b"\x00\x08"  # size field lies
    rsp = tpm.transport.transact(bad)
    ev = tpm.recorder.events()[-1]
    assert ev.garbled and ev.rc == int.from_bytes(rsp[6:10], "big") and ev.rc != 0
    assert "size" in names.rc_text(ev.rc) or ev.rc_text


def test_histogram_percentiles_against_known_latencies():
    h = LatencyHistogram()
    for us in range(1, 1001):  # 1 µs … 1 ms, one each
        h.record(us * 1000)
    s = h.summary()
    assert s["count"] == 1000
    # HDR with 3 significant digits: each value within 0.1 % of the exact order statistic
    for key, exact in (("p50", 500), ("p90", 900), ("p99", 990), ("max", 1000)):
        assert abs(s[key] - exact) <= exact * 0.001 + 0.001, (key, s[key])
    assert s["mean"] == pytest.approx(500.5, rel=1e-6)
    buckets = h.buckets()
    assert sum(c for _, c in buckets) == 1000 and buckets[-1][0] >= 1000


def test_histogram_clamps_instead_of_dropping():
    h = LatencyHistogram()
    h.record(10)  # 10 ns: below the 1 µs floor
    h.record(120 * 10**9)  # 2 minutes: above the 60 s ceiling
    assert h.count == 2


def test_ring_buffer_is_bounded(tpm):
    tpm.transport.sink = tpm.recorder = rec = Recorder(capacity=5)
    for _ in range(12):
        read_variable(tpm.transport)
    assert len(rec.events()) == 5 and rec.total >= 12
    assert rec.command_stats("user")[0x17A].hist.count >= 12


def test_poll_origin_kept_out_of_workload_stats(tpm):
    with labelled(origin="poll"):
        list_handles(tpm.transport)
    wl = Workload(tpm, "native", "none", "get_random")
    wl.run_one()
    work = tpm.recorder.command_stats("workload")
    assert 0x17A not in work and work[0x17B].hist.count == 1
    assert tpm.recorder.command_stats("poll")[0x17A].hist.count >= 4


def test_handles_appear_and_disappear(tpm):
    from tpmtop.sessions.native import NativeEngine

    e = NativeEngine(tpm.transport)
    e.create_null_primary()
    assert list_handles(tpm.transport) == []
    h = e.load_null()
    s = e.start_session(h)
    listed = {x.handle: x for x in list_handles(tpm.transport, tpm.recorder.owned_handles())}
    assert listed[h].kind == "transient" and listed[h].ours
    assert listed[s.handle].kind == "loaded-session" and listed[s.handle].ours
    e.save_session(s)
    listed = {x.handle: x.kind for x in list_handles(tpm.transport)}
    assert listed[s.handle] == "saved-session"
    flush(tpm.transport, h)
    flush(tpm.transport, s.handle)
    assert list_handles(tpm.transport) == []
    assert tpm.recorder.owned_handles() == set()


def test_raw_buffers_kept_for_the_newest_events_only(tpm, monkeypatch):
    import tpmtop.recorder as recorder_mod

    monkeypatch.setattr(recorder_mod, "BUFFERS_KEPT", 10)
    for _ in range(25):
        read_variable(tpm.transport)  # one GetCapability each
    evs = tpm.recorder.events()
    assert len(evs) >= 20
    assert all(e.command is None and e.response is None for e in evs[:-10])
    assert all(e.command is not None and e.response is not None for e in evs[-10:])
    assert all(e.cc == 0x17A and e.rc == 0 for e in evs)  # the decoded fields stay


def test_recorded_events_are_out_of_the_cyclic_gcs_sight(tpm):
    """The ring holds up to 100,000 events: tracked, each full collection walked them all with
    every thread stopped (40-85 ms under an unpaced workload). Events can hold no cycle."""
    import gc

    for _ in range(5):
        read_variable(tpm.transport)
    evs = tpm.recorder.events()
    assert len(evs) >= 5
    assert not any(gc.is_tracked(e) for e in evs)
    gc.collect()
    assert [e.cc for e in tpm.recorder.events()[-5:]] == [0x17A] * 5  # still there, still read


def test_wire_constants_are_tpm2_pytss_values():
    """wire.py spells four constants itself (importing tpm2-pytss at parse time costs every
    headless command ~55 ms); they must stay the TPM's."""
    from tpm2_pytss.constants import TPM2_CC, TPM2_RH, TPM2_ST

    assert (wire.TPM_ST_NO_SESSIONS, wire.TPM_ST_SESSIONS, wire.TPM_RS_PW, wire.CC_FLUSH_CONTEXT) == (
        TPM2_ST.NO_SESSIONS, TPM2_ST.SESSIONS, TPM2_RH.PW, TPM2_CC.FlushContext)


def test_the_command_table_is_tpm2_pytss_s():
    """wire.py reads handle counts from tpm/cc_table.py, not from tpm2-pytss's command parser
    (~150 ms to import on every `tpmtop info`): every entry, and every command the installed
    tpm2-pytss knows, must agree with the library."""
    from tpmtop.tpm import cc_table

    assert cc_table.from_library() == cc_table.HANDLES


def test_a_command_missing_from_the_table_is_asked_of_the_library(monkeypatch):
    """A command newer than the table (in TPM2_CC's range) is decoded as tpm2-pytss says."""
    monkeypatch.delitem(wire.HANDLES, 0x176)  # StartAuthSession: 2 handles, a response handle
    monkeypatch.setattr(wire, "_handle_counts", {})
    monkeypatch.setattr(wire, "_rsp_has_handle", {})
    assert wire.num_handles(0x176) == 2 and wire.response_has_handle(0x176)
    assert wire.num_handles(0x2000_0001) is None and not wire.response_has_handle(0x2000_0001)  # vendor


def test_a_batch_drains_into_the_same_histogram_as_value_by_value():
    """LatencyHistogram records each HDR slot of a batch once, with its count: counts,
    percentiles, min, max, mean and the encoded form equal plain value-by-value recording."""
    import random

    from hdrh.histogram import HdrHistogram

    from tpmtop.stats import HIGHEST_NS, LOWEST_NS, SIGNIFICANT_DIGITS

    rnd = random.Random(28)
    values = [int(rnd.lognormvariate(10.5, 2.0)) for _ in range(5000)]
    values += [0, 999, 1000, 1023, 1024, 2047, 2048, 2**20 - 1, 2**20, 2**21 + 5, HIGHEST_NS, 10**12]
    h = LatencyHistogram()
    for v in values:
        h.record(v)
    plain = HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)
    for v in values:
        plain.record_value(min(max(v, LOWEST_NS), HIGHEST_NS))
    _ = h.count  # drains
    assert h._h.encode() == plain.encode()
    for p in (0, 1, 50, 90, 99, 99.9, 100):
        assert h._h.get_value_at_percentile(p) == plain.get_value_at_percentile(p)
    assert (h._h.get_min_value(), h._h.get_max_value(), h._h.get_total_count()) == (
        plain.get_min_value(), plain.get_max_value(), plain.get_total_count())


def test_getcapability_is_read_as_tpm2_pytss_reads_it(tpm):
    """tpmtop info/handles parse GetCapability themselves (no tpm2-pytss import over SSH): on a
    real swtpm holding a transient object, a loaded and a saved session, every answer — with
    moreData set by a small count, and without — reads the same as tpm2-pytss's
    TPMS_CAPABILITY_DATA reads it."""
    import struct as st

    from tpm2_pytss.constants import ESYS_TR, TPM2_ALG, TPM2_SE
    from tpm2_pytss.types import TPM2B_PUBLIC, TPMS_CAPABILITY_DATA, TPMT_SYM_DEF

    from tpmtop.tpm import commands

    esys = tpm.esapi()
    esys.create_primary(None, TPM2B_PUBLIC.parse("ecc256"), ESYS_TR.NULL)
    sym = TPMT_SYM_DEF(algorithm=TPM2_ALG.NULL)
    esys.start_auth_session(ESYS_TR.NONE, ESYS_TR.NONE, TPM2_SE.HMAC, sym, TPM2_ALG.SHA256)
    saved = esys.start_auth_session(ESYS_TR.NONE, ESYS_TR.NONE, TPM2_SE.POLICY, sym, TPM2_ALG.SHA256)
    esys.context_save(saved)
    asked = [(commands.TPM_CAP_HANDLES, first, count) for first in (0x80000000, 0x02000000, 0x03000000, 0x81000000)
             for count in (1, 64)]
    asked += [(commands.TPM_CAP_TPM_PROPERTIES, first, count) for first in (0x100, 0x200) for count in (3, 128)]
    seen_more = seen_handles = 0
    for cap, first, count in asked:
        rsp = tpm.transport.transact(commands.build(commands.CC_GET_CAPABILITY, st.pack(">III", cap, first, count)))
        body = commands.check(rsp, commands.CC_GET_CAPABILITY)
        more, ours = commands.parse_capability(body)
        theirs, _ = TPMS_CAPABILITY_DATA.unmarshal(body[1:])
        assert more == (body[0] == 1) and ours.capability == int(theirs.capability)
        if cap == commands.TPM_CAP_HANDLES:
            assert list(ours.handles) == [int(h) for h in theirs.data.handles]
            seen_handles += len(ours.handles)
        else:
            assert list(ours.properties) == [(int(p.property), int(p.value)) for p in theirs.data.tpmProperties]
            assert len(ours.properties) == min(count, len(ours.properties)) > 0
        seen_more += more
    assert seen_more >= 2 and seen_handles >= 3  # both shapes of answer were seen


@pytest.mark.parametrize("body", [b"", b"\x00\x00\x00", bytes.fromhex("00 00000001 00000003 80000000"),
                                  bytes.fromhex("00 00000006 00000001 00000100"),
                                  bytes.fromhex("00 00000002 00000000")])
def test_a_garbled_getcapability_answer_is_a_tpm_error(body):
    """Short, truncated or of another capability: one TpmError, never a struct.error."""
    from tpmtop.errors import TpmError
    from tpmtop.tpm import commands

    with pytest.raises(TpmError, match="GetCapability"):
        commands.parse_capability(body)


def test_spelled_tpm_numbers_are_tpm2_pytss_values():
    """commands.py, names.py and cc_table.py spell the numbers `tpmtop info` and `handles` use
    (tpm2-pytss costs them 75–230 ms to import); each must stay the TPM's."""
    from tpm2_pytss.constants import TPM2_CAP, TPM2_CC, TPM2_HR, TPM2_HT, TPM2_RC, TPM2_ST

    from tpmtop.tpm import cc_table, commands

    assert (commands.TPM_ST_NO_SESSIONS, commands.CC_GET_CAPABILITY, commands.CC_FLUSH_CONTEXT,
            commands.CC_READ_PUBLIC, commands.TPM_CAP_HANDLES, commands.TPM_CAP_TPM_PROPERTIES) == (
        TPM2_ST.NO_SESSIONS, TPM2_CC.GetCapability, TPM2_CC.FlushContext, TPM2_CC.ReadPublic,
        TPM2_CAP.HANDLES, TPM2_CAP.TPM_PROPERTIES)
    assert names.HR_SHIFT == TPM2_HR.SHIFT
    for ht in ("PCR", "NV_INDEX", "HMAC_SESSION", "POLICY_SESSION", "PERMANENT", "TRANSIENT", "PERSISTENT"):
        assert getattr(names, f"HT_{ht}") == getattr(TPM2_HT, ht), ht
    for rc in ("INITIALIZE", "CONTEXT_GAP", "OBJECT_MEMORY", "SESSION_MEMORY", "SESSION_HANDLES"):
        assert getattr(names, f"RC_{rc}") == getattr(TPM2_RC, rc), rc
    assert cc_table.names_from_library() == cc_table.NAMES


def test_response_codes_are_worded_as_tpm2_pytss_words_them():
    """names.rc_text calls libtss2-rc's Tss2_RC_Decode itself (importing tpm2-pytss to word the
    first failed command cost `tpmtop run`'s report up to 0.9 s): the same words, for TPM
    format-zero and format-one codes, TCTI and ESAPI layers; out-of-range still shown as hex."""
    from tpm2_pytss.constants import TSS2_RC

    names.rc_text.cache_clear()
    for rc in (0x100, 0x101, 0x902, 0x903, 0x905, 0x901, 0x98E, 0x9A2, 0x1D5, 0x2C4, 0xA0009, 0x7000C, 0xFFFFFFFF):
        assert names.rc_text(rc) == str(TSS2_RC(rc).decode()), hex(rc)
    assert names._tss2_rc_decode() is not None  # the library was found: the path under test ran
    assert names.rc_text(1 << 40) == f"unknown response code 0x{1 << 40:x}"
    assert (names.rc_text(0), names.rc_text(None)) == ("success", "(no response)")


def test_a_reset_hands_the_old_events_to_a_thread_that_frees_them(tpm, monkeypatch):
    """r under an unpaced workload: freeing a full ring took ~20 ms of the dashboard's thread
    inside the frame that shows the reset. The recorder starts with fresh containers at once and
    the old ones are emptied on a thread of their own."""
    import time

    import tpmtop.recorder as recorder_mod

    for _ in range(5):
        read_variable(tpm.transport)
    rec = tpm.recorder
    old_events = rec.events()
    assert len(old_events) >= 5 and rec.command_stats("user")
    handed: list[tuple] = []
    sizes: list[list[int]] = []
    real = recorder_mod.free_later

    def watched(containers):
        handed.append(containers)
        sizes.append([len(c) for c in containers])  # before its thread can have begun
        real(containers)

    monkeypatch.setattr(recorder_mod, "free_later", watched)
    monkeypatch.setattr(recorder_mod, "FREE_AFTER_S", 0.0)
    rec.reset_stats()
    assert rec.events() == [] and rec.command_stats("user") == {} and rec.failed_events() == []
    assert len(handed) == 1 and any(n >= 5 for n in sizes[0])  # the old ring, whole
    deadline = time.monotonic() + 30
    while any(handed[0]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(handed[0]), "the old containers were never emptied"
    read_variable(tpm.transport)  # recording goes on into the new ring
    assert [e.cc for e in rec.events()] == [0x17A] * len(rec.events()) and rec.events()
    assert rec.command_stats("user")[0x17A].hist.count >= 1


def test_session_numbers_are_tpm2_pytss_values():
    """The session engine, its workload and the null primary's template spell their TPM numbers
    (the dashboard's workload loads them in every mode, and tpm2-pytss with the cryptography
    it imports is ~10,000 objects every full GC walks); each must stay the TPM's, and the
    template's bytes must be what tpm2-pytss marshals."""
    from tpm2_pytss.constants import TPM2_ALG, TPM2_CC, TPM2_RC, TPM2_RH, TPM2_ST, TPMA_OBJECT, TPMA_SESSION

    from tpmtop.sessions import engine, native, templates

    assert (engine.ATTR_CONTINUE, engine.ATTR_DECRYPT, engine.ATTR_ENCRYPT) == (
        TPMA_SESSION.CONTINUESESSION, TPMA_SESSION.DECRYPT, TPMA_SESSION.ENCRYPT)
    assert (native.ST_NO_SESSIONS, native.ST_SESSIONS, native.RS_PW) == (
        TPM2_ST.NO_SESSIONS, TPM2_ST.SESSIONS, TPM2_RH.PW)
    assert (native.CC_CREATE_PRIMARY, native.CC_CONTEXT_LOAD, native.CC_CONTEXT_SAVE, native.CC_FLUSH_CONTEXT,
            native.CC_START_AUTH_SESSION, native.CC_GET_RANDOM, native.CC_PCR_EXTEND) == (
        TPM2_CC.CreatePrimary, TPM2_CC.ContextLoad, TPM2_CC.ContextSave, TPM2_CC.FlushContext,
        TPM2_CC.StartAuthSession, TPM2_CC.GetRandom, TPM2_CC.PCR_Extend)
    for alg in ("AES", "SHA256", "CFB", "NULL", "ECC"):
        assert getattr(native, f"ALG_{alg}") == getattr(TPM2_ALG, alg), alg
    for rc in ("VALUE", "HIERARCHY", "HANDLE", "INTEGRITY", "REFERENCE_S0", "REFERENCE_S6"):
        assert getattr(names, f"RC_{rc}") == getattr(TPM2_RC, rc), rc
    assert templates.TPM_RH_NULL == TPM2_RH.NULL
    assert templates.NULL_PRIMARY_ATTRS == (
        TPMA_OBJECT.FIXEDTPM | TPMA_OBJECT.FIXEDPARENT | TPMA_OBJECT.SENSITIVEDATAORIGIN | TPMA_OBJECT.USERWITHAUTH
        | TPMA_OBJECT.NODA | TPMA_OBJECT.RESTRICTED | TPMA_OBJECT.DECRYPT)
    assert templates.null_primary_public_bytes() == bytes(templates.null_primary_public().marshal())


def test_create_primary_answer_is_read_as_tpm2_pytss_reads_it(tpm):
    """The native engine reads CreatePrimary's name and ECC point itself (no tpm2-pytss import
    in the dashboard): on the swtpm's real answer, what tpm2-pytss's types read; a cut answer
    is rejected, never read short."""
    from tpm2_pytss.types import TPM2B_CREATION_DATA, TPM2B_DIGEST, TPM2B_NAME, TPM2B_PUBLIC, TPMT_TK_CREATION

    from tpmtop.errors import IntegrityError
    from tpmtop.sessions import native

    e = native.NativeEngine(tpm.transport)
    handle, rparams = e.execute(native.CC_CREATE_PRIMARY, (native.TPM_RH_NULL,), struct.pack(">I", native.TPM_RH_NULL),
                                native._create_primary_params(), None, 0, rsp_handle=True)
    try:
        off = 0
        for t in (TPM2B_PUBLIC, TPM2B_CREATION_DATA, TPM2B_DIGEST, TPMT_TK_CREATION):
            off += t.unmarshal(rparams[off:])[1]
        name = bytes(TPM2B_NAME.unmarshal(rparams[off:])[0])
        ecc = TPM2B_PUBLIC.unmarshal(rparams)[0].publicArea.unique.ecc
        assert len(name) == 34 and native._name_from_create_primary(rparams) == name
        assert native._ecc_point_from_public(rparams) == (bytes(ecc.x), bytes(ecc.y))
        assert len(bytes(ecc.x)) == 32
        for cut in (rparams[:len(rparams) - 1], rparams[:40]):
            with pytest.raises(IntegrityError):
                native._name_from_create_primary(cut)
        with pytest.raises(IntegrityError):
            native._ecc_point_from_public(rparams[:60])
    finally:
        e.flush(handle)
