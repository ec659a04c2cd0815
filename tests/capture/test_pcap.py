"""pcap/pcapng both ways, against real components: tpm2-tss's pcap: TCTI driven by tpm2-tools
on a private TCP swtpm, dumpcap on loopback, and tshark's TPM 2.0 dissector reading
tpmtop's export."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.paths import TESTS
from tests.helpers.processes import run_tpmtop
from tpmtop.capture import load_capture, write_capture
from tpmtop.tpm.names import cc_name

needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                  reason="tshark is not installed (make test's bootstrap installs it)")


def _tcti_pcap_installed() -> bool:

    return bool(any(Path("/usr/lib").glob("*/libtss2-tcti-pcap.so*")))


needs_tcti_pcap = pytest.mark.skipif(not _tcti_pcap_installed(),
                                     reason="tpm2-tss's pcap TCTI (libtss2-tcti-pcap0) is not installed")


def tshark_rows(path) -> list[tuple[str, str, str]]:
    """(tcp.stream, tpm.req.cc, tpm.resp.rc) per TPM frame, as tshark's dissector sees them."""
    r = subprocess.run(["tshark", "-r", str(path), "-Y", "tpm", "-T", "fields", "-e", "tcp.stream",
                        "-e", "tpm.req.cc", "-e", "tpm.resp.rc"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [tuple(line.split("\t")) for line in r.stdout.splitlines() if line.strip()]


def record_getrandom(tcp_swtpm, tmp_path, n=8) -> tuple[str, bytes]:
    pcap = tmp_path / "getrandom.pcap"
    env = dict(os.environ, TCTI_PCAP_FILE=str(pcap))
    env.pop("TPM2TOOLS_TCTI", None)
    r = subprocess.run(["tpm2_getrandom", "-T", f"pcap:swtpm:host=127.0.0.1,port={tcp_swtpm.port}",
                        str(n), "--hex"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return str(pcap), bytes.fromhex(r.stdout.strip())


@needs_tcti_pcap
@needs_tshark
def test_tcti_pcap_file_imports_with_the_commands_tpm2_tools_sent(tcp_swtpm, tmp_path):
    """tpm2_getrandom through the pcap: TCTI: the imported capture holds the same commands as
    tshark dissects in the file, and the GetRandom response carries the bytes the tool printed."""
    pcap, random_bytes = record_getrandom(tcp_swtpm, tmp_path)
    out = tmp_path / "imported.json"
    r = run_tpmtop("import", pcap, "-o", str(out))
    assert r.returncode == 0, r.stderr
    cap = load_capture(out)
    events = cap["events"]
    seen = [int(cc, 16) for _, cc, _ in tshark_rows(pcap) if cc]
    assert [e["command"] for e in events] == [cc_name(c) for c in seen]
    assert [e["command"] for e in events].count("TPM2_CC_GetRandom") == 1
    gr = next(e for e in events if e["command"] == "TPM2_CC_GetRandom")
    assert gr["rc"] == 0 and gr["response_hex"].endswith(random_bytes.hex())
    assert all(e["wire_ns"] > 0 for e in events)  # from the frame timestamps
    assert cap["tpm"]["manufacturer"] == "IBM"  # swtpm, read from the GetCapability in the file
    assert "1 connection(s), raw framing" in r.stderr
    # -o naming the input pcap is refused (exit 2) and the pcap is still there, whole
    before = Path(pcap).read_bytes()
    same = run_tpmtop("import", pcap, "-o", pcap)
    assert same.returncode == 2 and "is the input" in same.stderr and Path(pcap).read_bytes() == before


@needs_tcti_pcap
def test_replay_opens_a_pcap_file_directly(tcp_swtpm, tmp_path):
    """`tpmtop replay FILE.pcap` loads the file as a capture (the loader the dashboard uses)."""
    from tpmtop.sources.replay import ReplaySource, load
    from tpmtop.viewmodel.rows.stream import captured_rows

    pcap, _ = record_getrandom(tcp_swtpm, tmp_path)
    src = ReplaySource(load(pcap), pcap)
    assert [row.command for row in captured_rows(src.captured_stream())][-1].endswith("GetRandom")
    runs = src.runs()
    assert runs and (runs[0].engine, runs[0].mode) == ("observed", "imported")


@needs_tshark
def test_pcapng_export_of_bench_events_dissects_with_the_same_commands(bench_captures, tmp_path):
    """A `bench --events` capture exported as pcapng: tshark's TPM dissector shows the same
    command codes, counts, order and response codes; import gives them back."""
    capfile = bench_captures.copy("none-per-command", tmp_path)
    cap = load_capture(capfile)
    out = tmp_path / "bench.pcapng"
    r = run_tpmtop("export", str(capfile), "--format", "pcapng", "-o", str(out))
    assert r.returncode == 0, r.stderr
    rows = tshark_rows(out)
    cmds = [int(cc, 16) for _, cc, _ in rows if cc]
    rcs = [int(rc, 16) for _, _, rc in rows if rc]
    events = cap["events"]
    assert [cc_name(c) for c in cmds] == [e["command"] for e in events]
    assert rcs == [e["rc"] for e in events]
    # per-command mode: one StartAuthSession per PCR_Extend, the whole point of the 6.10 story
    extends = [e for e in events if e["mode"] == "per-command" and e["command"] == "TPM2_CC_PCR_Extend"]
    assert len(extends) >= 10 and cmds.count(0x176) == len(extends)
    assert {s for s, _, _ in rows} == {"0"}  # one client, one TCP stream
    # and back: the import has the same commands with the original timing
    back = tmp_path / "back.json"
    r = run_tpmtop("import", str(out), "-o", str(back))
    assert r.returncode == 0, r.stderr
    again = load_capture(back)["events"]
    assert [e["command"] for e in again] == [e["command"] for e in events]
    assert [e["command_hex"] for e in again] == [e["command_hex"] for e in events]
    for a, b in zip(again, events, strict=False):
        assert abs(a["wire_ns"] - b["wire_ns"]) <= 2000  # pcap timestamps read back to the µs
        assert abs(a["t_ns"] - (b["t_ns"] - events[0]["t_ns"])) <= 2000


@needs_tcti_pcap
@needs_tshark
def test_pcapng_export_gives_each_client_its_own_tcp_stream(tcp_swtpm, tmp_path):
    """Events that say which client sent them (proxied traffic) become one TCP stream each."""
    pcap, _ = record_getrandom(tcp_swtpm, tmp_path)
    r = run_tpmtop("import", pcap, "-o", str(tmp_path / "a.json"))
    assert r.returncode == 0, r.stderr
    cap = load_capture(tmp_path / "a.json")
    for i, e in enumerate(cap["events"]):
        e["client"] = "ima" if i % 2 else "tpm2-tools"
    write_capture(tmp_path / "two.json", cap)
    r = run_tpmtop("export", str(tmp_path / "two.json"), "--format", "pcapng", "-o", str(tmp_path / "two.pcapng"))
    assert r.returncode == 0, r.stderr
    rows = tshark_rows(tmp_path / "two.pcapng")
    by_stream: dict[str, list[int]] = {}
    for s, cc, _ in rows:
        if cc:
            by_stream.setdefault(s, []).append(int(cc, 16))
    assert len(by_stream) == 2
    want = [[e["command"] for e in cap["events"] if e["client"] == c] for c in ("tpm2-tools", "ima")]
    assert sorted([cc_name(c) for c in v] for v in by_stream.values()) == sorted(want)
    assert "2 TCP stream(s)" in r.stderr


def test_export_of_a_capture_without_bytes_says_so(tmp_path):
    """Events without their bytes cannot become packets: exit 2 and one line saying why."""

    sample = TESTS / "captures" / "sample-1.0.json"
    r = run_tpmtop("export", str(sample), "--format", "pcapng", "-o", str(tmp_path / "x.pcapng"))
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "no" in r.stderr
    assert not (tmp_path / "x.pcapng").exists()


def test_a_file_that_is_not_a_pcap_is_exit_2(tmp_path):
    bad = tmp_path / "notes.pcap"
    bad.write_text("hello\n")
    r = run_tpmtop("import", str(bad), "-o", str(tmp_path / "o.json"))
    assert r.returncode == 2
    assert r.stderr.strip() == f"tpmtop: {bad}: not a pcap or pcapng file"
    assert not (tmp_path / "o.json").exists()


# -- tcpdump-style captures of a simulator port (dumpcap on loopback) ---------------------------

@pytest.fixture
def loopback_capture(request, tcp_swtpm, tmp_path):
    """dumpcap on lo for the swtpm's port (pcapng, or classic pcap as tcpdump writes it when
    parametrized so); yields a function that stops it and returns the file."""
    if shutil.which("dumpcap") is None:
        pytest.skip("dumpcap (wireshark-common) is not installed")
    fmt = getattr(request, "param", "pcapng")
    out = tmp_path / f"lo.{fmt}"
    proc = subprocess.Popen(["dumpcap", "-i", "lo", "-f", f"tcp port {tcp_swtpm.port}",
                             "-P" if fmt == "pcap" else "-n", "-w", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any("Capturing on" in x for x in said):
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        said.append(line)
    if proc.poll() is not None:
        said.append(proc.stderr.read())
        pytest.skip(f"cannot capture on loopback here: {' '.join(x.strip() for x in said if x.strip())[:200]}")

    def sync():
        """Poke the port (an empty TCP connection) until dumpcap has written new frames: then
        it is capturing, and everything before the poke is in the file."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or out.stat().st_size == 0):
            time.sleep(0.02)
        base = out.stat().st_size
        while time.monotonic() < deadline and out.stat().st_size <= base:
            socket.create_connection(("127.0.0.1", tcp_swtpm.port), timeout=10).close()
            time.sleep(0.05)
        assert out.stat().st_size > base, "dumpcap wrote nothing"

    def stop():
        sync()
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        return out

    sync()
    try:
        yield stop
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_tcpdump_of_swtpm_framing_imports(tcp_swtpm, loopback_capture, tmp_path):
    """tpm2-tools' swtpm TCTI (raw TPM bytes, a TCP connection per command) seen on lo."""
    env = dict(os.environ)
    env.pop("TPM2TOOLS_TCTI", None)
    r = subprocess.run(["tpm2_getrandom", "-T", tcp_swtpm.tcti, "16", "--hex"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    pcap = loopback_capture()
    out = tmp_path / "lo.json"
    r2 = run_tpmtop("import", str(pcap), "--port", str(tcp_swtpm.port), "-o", str(out))
    assert r2.returncode == 0, r2.stderr
    events = load_capture(out)["events"]
    gr = [e for e in events if e["command"] == "TPM2_CC_GetRandom"]
    assert len(gr) == 1 and gr[0]["response_hex"].endswith(r.stdout.strip())
    assert "raw framing" in r2.stderr


@pytest.mark.parametrize("loopback_capture", ["pcap"], indirect=True)
def test_tcpdump_of_mssim_framing_imports(tcp_swtpm, loopback_capture, tmp_path):
    """The Microsoft simulator framing (TPM_SEND_COMMAND, locality, size; size, response, ack),
    which swtpm also speaks, sent by a client on one connection and seen on lo; written as a
    classic pcap file, as tcpdump does."""
    cmds = [bytes.fromhex("80010000000c0000017b0010"),  # GetRandom(16)
            bytes.fromhex("8001000000160000017a000000060000010500000001"),  # GetCapability(MANUFACTURER)
            bytes.fromhex("80010000000c0000017b0008")]
    answers = []
    with socket.create_connection(("127.0.0.1", tcp_swtpm.port), timeout=30) as s:
        for c in cmds:
            s.sendall(struct.pack(">IBI", 8, 0, len(c)) + c)
            size = struct.unpack(">I", _recv(s, 4))[0]
            answers.append(_recv(s, size))
            assert _recv(s, 4) == b"\0\0\0\0"
        s.sendall(struct.pack(">I", 20))  # TPM_SESSION_END
    pcap = loopback_capture()
    out = tmp_path / "mssim.json"
    r = run_tpmtop("import", str(pcap), "--port", str(tcp_swtpm.port), "-o", str(out))
    assert r.returncode == 0, r.stderr
    events = load_capture(out)["events"]
    assert [e["command_hex"] for e in events] == [c.hex() for c in cmds]
    assert [e["response_hex"] for e in events] == [a.hex() for a in answers]
    assert "mssim framing" in r.stderr


def _recv(s, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "swtpm closed the connection"
        buf += chunk
    return buf


@needs_tshark
def test_events_without_bytes_are_counted_and_left_out(tmp_path):
    """A capture older than the recorder's byte window: the events that kept their bytes are
    exported, and the rest are counted on stderr."""
    capfile = tmp_path / "b.json"
    r = run_tpmtop("bench", "--sim", "--op", "get_random", "--modes", "none", "--engine", "native", "-n", "10",
                   "--warmup", "0", "--events", "--json", str(capfile), "-q", timeout=300)
    assert r.returncode == 0, r.stderr
    cap = load_capture(capfile)
    events = cap["events"]
    half = len(events) // 2
    for e in events[:half]:
        del e["command_hex"], e["response_hex"]
    write_capture(tmp_path / "half.json", cap)
    r = run_tpmtop("export", str(tmp_path / "half.json"), "--format", "pcapng", "-o", str(tmp_path / "h.pcapng"))
    assert r.returncode == 0, r.stderr
    assert f"{half} of {len(events)} events kept no bytes" in r.stderr
    cmds = [cc for _, cc, _ in tshark_rows(tmp_path / "h.pcapng") if cc]
    assert [cc_name(int(c, 16)) for c in cmds] == [e["command"] for e in events[half:]]


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(magic=st.sampled_from([b"\xd4\xc3\xb2\xa1", b"\x0a\x0d\x0d\x0a"]), body=st.binary(max_size=300))
def test_damaged_files_are_bad_input_never_a_crash(tmp_path, magic, body):
    """A file with a pcap/pcapng magic and garbage after it: PcapError (exit 2), nothing else."""
    from tpmtop.importers.pcap import PcapError, read_pcap

    f = tmp_path / "x.pcap"
    f.write_bytes(magic + body)
    with pytest.raises(PcapError):
        read_pcap(f)


def test_an_imported_capture_does_not_claim_this_machine(bench_captures, tmp_path):
    """Issue 38: `import` stamped the importing machine's name and kernel on traffic recorded
    elsewhere. Exported as pcapng and imported again, the host is "unknown", never ours."""
    import platform
    import socket

    capfile = bench_captures.copy("none-per-command", tmp_path)
    out, back = tmp_path / "bench.pcapng", tmp_path / "back.json"
    assert run_tpmtop("export", str(capfile), "--format", "pcapng", "-o", str(out)).returncode == 0
    r = run_tpmtop("import", str(out), "-o", str(back))
    assert r.returncode == 0, r.stderr
    host = load_capture(back)["host"]
    assert host["hostname"] == "unknown" and host["kernel"] == "unknown" and "not known" in host["note"]
    assert socket.gethostname() not in json.dumps(host) and platform.release() not in json.dumps(host)
    r = run_tpmtop("compare", str(back), str(back))
    assert r.returncode == 0 and "kernel unknown" in r.stdout and platform.release() not in r.stdout
    # issue 55 item 6: the file does not say whether a simulator answered: not claimed either way
    assert load_capture(back)["tpm"]["simulated"] is None
    # issue 55 item 6: no empty fields in the header ("( fw , kernel unknown)")
    assert "(TPM not named, kernel unknown)" in r.stdout and "( fw" not in r.stdout, r.stdout
