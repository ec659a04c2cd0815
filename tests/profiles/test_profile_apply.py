"""Profiles applied to a real swtpm: responses held as long as the profile says, the built-in
SLB9670 profile reproducing the published per-extend costs, and real hardware refused."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers.processes import free_port_pair, run_tpmtop
from tpmtop.bench import BenchPlan, run_bench
from tpmtop.cli import main
from tpmtop.connect import open_tpm
from tpmtop.profiles import load_profile
from tpmtop.profiles.apply import apply_profile
from tpmtop.profiles.loader import from_json
from tpmtop.profiles.profile import has_hmac_session
from tpmtop.tpm import names, wire

pytestmark = pytest.mark.skipif(shutil.which("swtpm") is None, reason="swtpm not installed")

# The published tpm_transmit_cmd durations on the SLB9670 (domain notes §3), µs: what the
# built-in profile holds each command to.
TRACE_US = {"E0": 6_360.029, "Eh": 24_356.46, "L": 36_976.99, "S": 84_746.51, "F": 3_195.083}

# Figures far above what the swtpm needs (≤ 0.5 ms here, see domain notes §4) and distinct by
# ≥ 1 ms, so that a response held for the wrong command or the wrong session variant shows.
def _src(what):
    return {"kind": "estimated", "detail": f"test figure for {what}"}


TEST_PROFILE = {
    "schema": "tpmtop.profile/1", "name": "test-chip", "chip": {"model": "test"},
    "commands": {
        "PCR_Extend": {"no_session": {"median_us": 3000, "source": _src("x")},
                       "hmac_session": {"median_us": 6000, "source": _src("x")}},
        "ContextLoad": {"any": {"median_us": 4000, "source": _src("x")}},
        "StartAuthSession": {"any": {"median_us": 7000, "source": _src("x")}},
        "FlushContext": {"any": {"median_us": 2000, "source": _src("x")}},
        "ContextSave": {"any": {"median_us": 5000, "p10_us": 4500, "p90_us": 5500, "source": _src("x")}},
    },
}
# No upper bound on how late a held response may be: on a loaded machine that is the
# scheduler's business, not tpmtop's behaviour (benchmarks/shaper_bias.py measures it). What
# is tpmtop's: one hold decided per command, the figure of the right command and session
# variant (or the seeded draw from its spread), and never a response before its figure.
def test_each_command_is_held_at_least_as_long_as_the_profile_says():
    prof = from_json(TEST_PROFILE)
    with open_tpm(sim=True) as conn:
        apply_profile(conn, prof, seed=11)
        decided = conn.transport.shaper
        holds: list[tuple[int | None, int | None]] = []

        def spy(info):  # records what the shaper decided for each command, changes nothing
            h = decided(info)
            holds.append((info.cc, h))
            return h

        conn.transport.shaper = spy
        res = run_bench(conn, BenchPlan(op="extend", modes=["none", "per-command", "reuse", "saved"],
                                        engines=["native"], n=3, warmup=0, batch=3))
        assert res.error is None and not res.interrupted
        events = conn.recorder.events()
    assert [cc for cc, _ in holds] == [e.cc for e in events]  # one decision per command, in order
    replay = prof.shaper(seed=11)  # the same seed: the i-th held command drew the i-th sample
    held = 0
    for e, (_, hold) in zip(events, holds, strict=False):
        f = prof.figure(e.cc, "hmac_session" if has_hmac_session(e.sessions) else "no_session")
        if f is None:
            assert hold is None, names.cc_short(e.cc)  # an unprofiled command is not held
            continue
        want = replay(wire.CommandInfo(e.cc, 0, e.handles, e.sessions, None, False))
        assert hold == want, (names.cc_short(e.cc), hold, want)
        if f.p10_us is None:  # no spread: exactly the figure of this command and variant
            assert hold == round(f.median_us * 1000), (names.cc_short(e.cc), hold, f.median_us)
        if e.rc == 0:
            assert e.wire_ns >= hold, (names.cc_short(e.cc), e.wire_ns, hold)
            held += 1
    seen = {names.cc_short(e.cc) for e in events}
    assert {"PCR_Extend", "ContextLoad", "StartAuthSession", "FlushContext", "ContextSave"} <= seen
    assert held >= 3 * (1 + 4 + 1 + 3)
    assert conn.profile_name == "test-chip"


@pytest.fixture(scope="module")
def slb_capture(bench_captures, tmp_path_factory):
    return bench_captures.copy("slb9670", tmp_path_factory.mktemp("slb"))


def test_builtin_profile_reproduces_the_published_figures(slb_capture):
    """Each mode's operation costs at least what the published trace says its commands cost
    on the SLB9670 (the profile holds every response that long), with the commands the
    kernel sends. How far above — the host's share plus the shaper's wake-up bias on this
    machine — is benchmarks/shaper_bias.py's to measure: no upper bound here, the test must
    hold on a loaded machine."""
    cap = json.loads(slb_capture.read_text())
    assert cap["tpm"]["profile"] == "slb9670" and cap["tpm"]["simulated"] is True
    runs = {r["mode"]: r for r in cap["runs"]}
    e0, eh, load, start, flush = (TRACE_US[k] for k in ("E0", "Eh", "L", "S", "F"))
    assert runs["none"]["op_us"]["p50"] >= e0
    assert runs["per-command"]["op_us"]["p50"] >= load + start + flush + eh  # 149,275 of the published 151,171
    assert runs["reuse"]["op_us"]["p50"] >= eh  # the thread's prediction: reuse ≈ one HMAC PCR_Extend
    saved = runs["saved"]["commands"]
    # the thread's ~61 ms: ContextLoad + PCR_Extend (it did not count ContextSave)
    assert saved["TPM2_CC_ContextLoad"]["p50"] + saved["TPM2_CC_PCR_Extend"]["p50"] >= load + eh
    assert {m: sum(r["commands_per_op"].values()) for m, r in runs.items()} == \
        {"none": 1, "per-command": 4, "reuse": 1, "saved": 3}


@pytest.mark.parametrize("events", [True, False])
def test_from_capture_gives_back_the_profile(slb_capture, events, tmp_path, capsys):
    if not events:  # the runs' summaries and 4-per-decade histograms only
        cap = json.loads(slb_capture.read_text())
        cap.pop("events", None), cap.pop("ops", None)
        slb_capture = tmp_path / "no-events.json"
        slb_capture.write_text(json.dumps(cap))
    out = tmp_path / "replayed.json"
    assert main(["profile", "from-capture", str(slb_capture), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "was itself recorded under profile 'slb9670'" in err
    assert ("no per-command events" in err) is not events
    got, want = load_profile(str(out)), load_profile("slb9670")
    # How close the figures come back is the shaper's wake-up bias on this machine, measured
    # by benchmarks/shaper_bias.py, not asserted here. What from-capture must do: every
    # profiled command and session variant the bench used comes back, from this capture, as
    # the figure it was held to — never below it (beyond the histograms' 3-digit resolution),
    # and nearer to it than to any other variant of the same command.
    exercised = {("PCR_Extend", "no_session"), ("PCR_Extend", "hmac_session"), ("ContextLoad", "any"),
                 ("StartAuthSession", "any"), ("FlushContext", "any"), ("ContextSave", "any")}
    back = set()
    for cc, entry in got.commands.items():
        for variant, f in entry.items():
            w = want.figure(cc, variant)
            if w is None:  # e.g. CreatePrimary (unprofiled) is simply the swtpm's time
                continue
            what = (names.cc_short(cc), variant)
            assert f.source["kind"] == "capture" and f.source["file"] == str(slb_capture), what
            assert f.median_us >= w.median_us * 0.995, (what, f.median_us, w.median_us)
            others = {v: o.median_us for v, o in want.commands[cc].items() if o.median_us != w.median_us}
            for v, o in others.items():
                assert abs(f.median_us - w.median_us) < abs(f.median_us - o), (what, f.median_us, v, o)
            back.add((names.cc_short(cc), "any" if len(want.commands[cc]) == 1 else variant))
    assert exercised <= back, exercised - back


# -- refused on real hardware -------------------------------------------------------------
@pytest.fixture
def tcp_swtpm(tmp_path):
    """A swtpm we start ourselves on TCP: to tpmtop it is 'real hardware' (-T swtpm:…)."""
    port = free_port_pair()
    log = tmp_path / "swtpm.log"
    proc = subprocess.Popen(["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={tmp_path}",
                             "--server", f"type=tcp,port={port}", "--ctrl", f"type=tcp,port={port + 1}",
                             "--flags", "not-need-init,startup-clear", "--log", f"file={log},level=20"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("swtpm did not start")
                time.sleep(0.05)
        yield port, log
    finally:
        proc.terminate()
        proc.wait(5)


def test_profile_on_real_hardware_is_refused_before_anything_is_sent(tcp_swtpm, capsys):
    port, log = tcp_swtpm
    before = log.stat().st_size if log.exists() else 0
    rc = main(["bench", "-T", f"swtpm:port={port}", "--profile", "slb9670", "-n", "1", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "add --sim" in err[0], err
    assert (log.stat().st_size if log.exists() else 0) == before  # swtpm logs every command it reads
    # The check above can fail: the same TPM without --profile does receive commands.
    assert main(["info", "-T", f"swtpm:port={port}"]) == 0
    assert log.stat().st_size > before


@pytest.mark.parametrize("how", [["-T", "device:/dev/tpmrm0"], []])
def test_profile_without_sim_is_refused(how, monkeypatch, capsys):
    # [] = $TPM2TOOLS_TCTI / the default device: only an explicit --sim may be slowed down.
    monkeypatch.setenv("TPM2TOOLS_TCTI", "device:/dev/tpmrm0")
    assert main(["bench", *how, "--profile", "slb9670", "-n", "1", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--profile slb9670" in err[0] and "add --sim" in err[0]


# -- profile record ------------------------------------------------------------------------
def test_record_writes_a_valid_profile_with_progress_and_pcr16_note(tmp_path):
    out = tmp_path / "chip.json"
    master, slave = pty.openpty()  # stderr on a terminal: the progress bar is drawn
    try:
        proc = subprocess.run([sys.executable, "-m", "tpmtop", "profile", "record", "--sim", "-o", str(out),
                               "-n", "4", "--warmup", "1", "--ops", "extend"],
                              stdout=subprocess.PIPE, stderr=slave, timeout=60, cwd=os.getcwd())
        os.close(slave)
        slave = None
        err = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            err += chunk
    finally:
        if slave is not None:
            os.close(slave)
        os.close(master)
    err = err.decode(errors="replace")
    assert proc.returncode == 0, err
    assert "PCR 16" in err and "safety" in err
    # the progress bar reached the end (4 ops × 4 modes), with its rate (issue 24 item 11)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err)  # the bar's colours and cursor moves
    assert re.search(r"recording .* 16/16 [\d,]+ ops/s", plain), plain
    prof = load_profile(str(out))
    assert prof.name == "chip"
    ext = names.cc_from_name("PCR_Extend")
    assert set(prof.commands[ext]) == {"no_session", "hmac_session"}
    for c in ("ContextLoad", "StartAuthSession", "FlushContext", "ContextSave"):
        f = prof.figure(names.cc_from_name(c), "no_session")
        assert f is not None and f.source["kind"] == "recorded" and f.median_us > 0, c
    # 4 counted ops per mode: PCR_Extend without a session comes from mode "none" only.
    assert prof.commands[ext]["no_session"].samples == 4
    assert prof.chip["simulated"] is True


def test_record_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "chip.json"
    out.write_text("{}")
    assert main(["profile", "record", "--sim", "-o", str(out), "-n", "1"]) == 2
    assert "--force" in capsys.readouterr().err
    assert out.read_text() == "{}"


def test_bench_marks_the_rows_a_profile_does_not_cover(tmp_path):
    """Issue 38: slb9670 has no CreatePrimary figure, so `bench --op create_primary` runs it at
    swtpm speed: every row says so, each ratio is marked as not the chip's, and --json carries
    the same in each run (profile_gaps). An extend bench, all covered, has no such mark."""
    out = tmp_path / "cp.json"
    r = run_tpmtop("bench", "--sim", "--profile", "slb9670", "--op", "create_primary", "--modes", "none,per-command",
                   "--engine", "native", "-n", "2", "--warmup", "0", "-q", "--json", str(out), timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("native")]
    assert len(rows) == 2 and all("CreatePrimary at swtpm speed" in ln and "(not the chip's)" in ln for ln in rows)
    assert "# not in profile slb9670, so at swtpm speed" in r.stdout
    runs = json.loads(out.read_text())["runs"]
    assert [run["profile_gaps"] for run in runs] == [["TPM2_CC_CreatePrimary"]] * 2
    r = run_tpmtop("bench", "--sim", "--profile", "slb9670", "--op", "extend", "--modes", "none,per-command",
                   "--engine", "native", "-n", "2", "--warmup", "0", "-q", timeout=300)
    assert r.returncode == 0 and "swtpm speed" not in r.stdout.split("\n", 2)[2] and "not the chip's" not in r.stdout


def test_bench_marks_a_row_the_profile_prices_by_estimate():
    """Issue 55 item 3: slb9670's ContextSave is an estimate (equal to its ContextLoad) and its
    ContextLoad is the null primary's, not a saved session's: `bench --modes saved` marks the
    saved row and says which; none and reuse, all published figures, carry no mark."""
    r = run_tpmtop("bench", "--sim", "--profile", "slb9670", "--modes", "none,reuse,saved",
                   "--engine", "native", "-n", "2", "--warmup", "0", "-q", timeout=300)
    assert r.returncode == 0, r.stderr
    rows = {ln.split()[1]: ln for ln in r.stdout.splitlines() if ln.startswith("native")}
    assert set(rows) == {"none", "reuse", "saved*"}, rows
    assert "# saved*: ContextLoad priced as the null primary's, ContextSave estimated" in r.stdout
    assert all(len(ln) <= 80 for ln in r.stdout.splitlines() if ln.startswith("# saved*")), r.stdout


def test_p_drops_the_saved_caveat_once_saved_ran():
    """`p`: the caveat "the saved session's ContextLoad priced as the null primary's" is about
    pricing saved from its commands; once saved ran here it is N × its own op p50."""
    from tpmtop.tui.screens.projection import projection_markup

    comps = {"E0": 20.0, "L": 45.0, "S": 370.0, "F": 22.0, "Eh": 22.0, "C": 25.0, "H": 150.0}
    caveat = "priced as the null primary's"
    assert caveat in projection_markup(comps, 1000, "-", "-", per_mode_us={"none": 27.0})
    assert caveat not in projection_markup(comps, 1000, "-", "-", per_mode_us={"none": 27.0, "saved": 90.0})
