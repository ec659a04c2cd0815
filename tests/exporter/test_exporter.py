"""``tpmtop exporter``: what it serves for a real kernel trace, in both exposition formats,
checked by prometheus_client's parser and Prometheus' own promtool; its errors; its rules.

The scrape by a running Prometheus (and a fleet of exporters) is in test_exporter_prometheus.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.captures import capture_of
from tests.helpers.exporter import KERNEL_TRACES, REPO, Exporter, samples, value
from tpmtop.exporter import families as fam
from tpmtop.importers.observed import RC_NOT_TRACED

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian's prometheus package) is not "
                                    "installed: scripts/bootstrap.sh --test installs it")
RULES = REPO / "contrib" / "prometheus"
HMAC_TRACE = KERNEL_TRACES / "trace-6.10-ima-hmac.txt"
# the kernel path words of tpmtop.kernel.trace_pipe.path_label: the only values of `path`
PATHS = {"extend", "set-up", "end", "hwrng", "trusted", "pcrread", "getcap", "probe", "shutdown", "startup",
         "selftest", "user", "rm", "tpmtop", "kernel"}


@pytest.fixture
def exporter():
    started: list[Exporter] = []

    def start(*args: str) -> Exporter:
        e = Exporter(*args)
        started.append(e)
        return e

    yield start
    for e in started:
        e.stop()


def test_serves_what_the_capture_of_the_same_trace_holds(exporter, tmp_path):
    cap = capture_of(HMAC_TRACE, tmp_path)
    events = cap["events"]
    exp = exporter("--kernel-trace", str(HMAC_TRACE))
    assert exp.address.startswith("127.0.0.1:"), exp.first_line  # loopback unless told otherwise
    ops = Counter(o["op"] for o in cap["ops"])
    # every command answered and every operation ended (an operation is counted at its end,
    # which the exporter can read after its last command's answer: seen under load)
    text = exp.scrape_until(lambda t: value(t, "tpmtop_kernel_command_responses_total") == len(events)
                    and all(value(t, "tpmtop_kernel_operation_duration_seconds_count", operation=op) == n
                            for op, n in ops.items()),
                    f"{len(events)} commands and {sum(ops.values())} operations")
    # per command: the histogram's count and sum are the capture's answered commands and wire time
    # answered: a response code, or one the probes could not read (RC_NOT_TRACED); else no response
    per_cmd = Counter(e["command"].removeprefix("TPM2_CC_") for e in events
                      if e["rc"] is not None or e.get("rc_text") == RC_NOT_TRACED)
    for cmd, n in per_cmd.items():
        assert value(text, "tpmtop_kernel_command_duration_seconds_count", command=cmd) == n, cmd
        want = sum(e["wire_ns"] for e in events if e["command"] == f"TPM2_CC_{cmd}") / 1e9
        assert value(text, "tpmtop_kernel_command_duration_seconds_sum", command=cmd) == pytest.approx(want, rel=1e-9)
    # the 6.10 behaviour: a salted session set up in each of the two extends, and the verdict says so
    assert value(text, "tpmtop_kernel_session_setups_total", operation="extend") == 2
    assert value(text, "tpmtop_kernel_session_mode", mode="per-command") == 1
    assert value(text, "tpmtop_kernel_session_mode") == 1  # exactly one mode is current
    assert value(text, "tpmtop_kernel_command_duration_seconds_count", command="StartAuthSession", path="set-up") == 2
    assert value(text, "tpmtop_kernel_trace_up") == 1
    assert value(text, "tpmtop_exporter_info", source="trace-file") == 1
    # the IMA extend's cost, split: TPM share + host share = the whole operation
    whole = value(text, "tpmtop_kernel_operation_duration_seconds_sum", operation="extend")
    tpm = value(text, "tpmtop_kernel_operation_tpm_duration_seconds_sum", operation="extend")
    host = value(text, "tpmtop_kernel_operation_host_duration_seconds_sum", operation="extend")
    assert tpm > 0 and host > 0 and tpm + host == pytest.approx(whole, rel=1e-9)
    assert whole == pytest.approx(sum(o["total_ns"] for o in cap["ops"] if o["op"] == "extend") / 1e9, rel=1e-9)

    # bounded labels: every family is one of tpmtop's (or prometheus_client's process_*), no
    # pid/comm/handle label, and every `path` from the closed set
    for (name, labels) in samples(text):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert base in fam.FAMILY_NAMES or name.startswith("process_"), name
        keys = {k for k, _ in labels}
        assert not keys & {"pid", "comm", "handle", "task", "client"}, (name, labels)
        if "path" in keys:
            assert dict(labels)["path"] in PATHS, labels
        if "le" in keys and dict(labels)["le"] != "+Inf":
            assert float(dict(labels)["le"]) in fam.BUCKETS  # the documented, fixed buckets

    # content negotiation as prometheus_client does it: OpenMetrics when asked for, else 0.0.4
    ctype, om = exp.scrape("application/openmetrics-text; version=1.0.0; charset=utf-8")
    assert ctype.startswith("application/openmetrics-text") and om.rstrip().endswith("# EOF")
    ctype, classic = exp.scrape("text/plain")
    assert ctype.startswith("text/plain; version=0.0.4") and "# EOF" not in classic
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

    om_names = {f.name for f in om_parse(om)}
    assert {"tpmtop_kernel_command_duration_seconds", "tpmtop_kernel_session_setups"} <= om_names

    code, err = exp.stop()
    assert code == 130 and "Traceback" not in err, err  # SIGTERM: the documented 130, one line


@needs_promtool
def test_promtool_accepts_the_exposition(exporter):
    exp = exporter("--kernel-trace", str(KERNEL_TRACES / "trace-6.12-kept-session-ops.txt"))

    def kept(t: str) -> bool:
        # a kept session (6.12+): fewer set-ups than extends. Waited for, not read once: on a
        # loaded machine the first scrape can come after the first extend only (1 set-up, 1 extend)
        ext = value(t, "tpmtop_kernel_operation_duration_seconds_count", operation="extend")
        return 0 < value(t, "tpmtop_kernel_session_setups_total", operation="extend") < ext

    text = exp.scrape_until(kept, "more extends than session set-ups")
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert value(text, "tpmtop_kernel_session_mode", mode="reuse") == 1


def test_a_retry_loop_is_counted_as_a_pattern(exporter):
    exp = exporter("--kernel-trace", str(KERNEL_TRACES / "trace-irqinfo-off-unseal-retry.txt"))
    text = exp.scrape_until(lambda t: value(t, "tpmtop_kernel_command_responses_total") == 4, "4 commands")
    assert value(text, "tpmtop_kernel_command_responses_total", command="Unseal", rc="0x128") == 4
    assert value(text, "tpmtop_kernel_pattern_commands_total", pattern="repeated-failure") == 4
    assert value(text, "tpmtop_kernel_pattern_lost_seconds_total", pattern="repeated-failure") == \
        pytest.approx(0.008, rel=1e-3)
    assert value(text, "tpmtop_kernel_pattern_commands_total", pattern="slots-full") == 0


@pytest.mark.parametrize("args, says", [
    (["--kernel-trace", "/nonexistent/trace.txt"], "no such file"),
    (["--listen", "127.0.0.1:99999"], "not a port number"),
    (["--listen", "nowhere"], "want HOST:PORT"),
    (["--tls-cert", "/etc/hostname"], "go together"),
    (["--tls-client-ca", "/etc/hostname"], "needs --tls-cert"),
    (["--probe", "1"], "between 10 and 86400"),
    (["--root", "/nonexistent"], "no such folder"),
    (["--tls-cert", "/etc/hostname", "--tls-key", "/etc"], "--tls-key /etc: it is a directory"),
    (["--tls-cert", "/etc/hostname", "--tls-key", "/etc/hostname"], "cannot load them"),
])
def test_bad_usage_is_one_line_and_exit_2(args, says):
    source = [] if "--kernel-trace" in args else ["--no-kernel"]
    r = subprocess.run([sys.executable, "-m", "tpmtop", "exporter", *source, *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_port_in_use_is_one_line_and_exit_2(exporter):
    first = exporter("--no-kernel")
    r = subprocess.run([sys.executable, "-m", "tpmtop", "exporter", "--no-kernel", "--listen", first.address],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "cannot listen on" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_cli_parser_does_not_load_prometheus_client():
    """`tpmtop --help` (every subcommand's parser) must not pay for the exporter's library."""
    code = ("import sys; from tpmtop.cli import build_parser; build_parser().parse_args(['exporter', '--no-kernel']); "
            "print('prometheus_client' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr


# -- the rules and the dashboard fleets drop in ---------------------------------------------------
def names_used(text: str) -> set[str]:
    """tpmtop metric names an expression file uses, without recording-rule names (a:b:c)."""
    out = set()
    for m in re.finditer(r"(?<![:\w])(tpmtop_[a-z0-9_]+)(?![:\w])", text):
        out.add(re.sub(r"_(bucket|sum|count)$", "", m.group(1)))
    return out


def test_rules_and_dashboard_use_only_served_names():
    served = fam.FAMILY_NAMES
    for f in (RULES / "tpmtop-rules.yml", REPO / "contrib" / "grafana" / "tpmtop-fleet.json"):
        used = names_used(f.read_text())
        assert used and used <= served, (f.name, sorted(used - served))


@needs_promtool
def test_promtool_checks_and_unit_tests_the_rules():
    r = subprocess.run([PROMTOOL, "check", "rules", "tpmtop-rules.yml"], cwd=RULES, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([PROMTOOL, "test", "rules", "tpmtop-rules.test.yml"], cwd=RULES, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


# -- --probe: read-only GetCapability on a real swtpm ----------------------------------------------
def test_probe_sends_only_getcapability_and_sees_slots_taken(tcp_swtpm):
    """The probe's whole traffic is GetCapability and ReadClock (read-only, no authorization), and it
    reads what another client holds."""
    from argparse import Namespace

    from tpm2_pytss import ESAPI, TCTILdr
    from tpm2_pytss.types import TPM2B_PUBLIC

    from tpmtop.exporter.families import SlotKind
    from tpmtop.exporter.server import new_registry
    from tpmtop.exporter.tpm_probe import TpmProbe

    def other_program(fn):
        """Another program's own connection (a swtpm serves one client at a time)."""
        esys = ESAPI(TCTILdr("swtpm", f"host=127.0.0.1,port={tcp_swtpm.port}"))
        try:
            return fn(esys)
        finally:
            esys.close()

    probe = TpmProbe(new_registry(), Namespace(tcti=tcp_swtpm.tcti, sim=False, raw_device=False, timeout=5.0))
    try:
        probe.keep_open = True  # to read its recorder: every command of the first probe
        assert probe.read_once()
        sent = [e.name for e in probe.conn.recorder.events()]
        assert sent and set(sent) == {"TPM2_CC_GetCapability", "TPM2_CC_ReadClock"}, sent  # read-only, no auth
        probe.conn.close()
        probe.conn, probe.keep_open = None, False
        free = probe.slots[SlotKind.TRANSIENT]
        assert free >= 1
        # an object another program leaves loaded (a swtpm keeps it across connections)
        other_program(lambda e: e.create_primary(None, TPM2B_PUBLIC.parse("ecc256")))  # the swtpm is this test's
        assert probe.read_once()
        assert probe.conn is None  # not held between probes
        assert probe.slots[SlotKind.TRANSIENT] == free - 1
    finally:
        probe.close()


def test_probe_serves_identity_and_slots(exporter, tcp_swtpm):
    exp = exporter("--no-kernel", "--probe", "60", "-T", tcp_swtpm.tcti)
    text = exp.scrape_until(lambda t: "tpmtop_tpm_probe_success" in t, "a probe")
    assert value(text, "tpmtop_tpm_probe_success") == 1
    assert value(text, "tpmtop_tpm_slots_available", kind="transient") >= 1
    assert value(text, "tpmtop_tpm_info", manufacturer="IBM") == 1  # swtpm says it is IBM's
    assert value(text, "tpmtop_kernel_trace_up") == 0  # --no-kernel: not tracing, and it says so


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
def test_the_unit_file_verifies(tmp_path):
    """contrib/systemd/tpmtop-exporter.service passes `systemd-analyze verify` (with its
    ExecStart pointed at this venv's tpmtop: verify checks that the program exists)."""
    unit = (REPO / "contrib" / "systemd" / "tpmtop-exporter.service").read_text()
    assert "ExecStart=/usr/local/bin/tpmtop exporter --listen 127.0.0.1:" in unit  # loopback by default
    assert "IPAddressAllow=localhost" in unit and "DevicePolicy=closed" in unit
    here = tmp_path / "tpmtop-exporter.service"
    here.write_text(unit.replace("/usr/local/bin/tpmtop", str(Path(sys.executable).with_name("tpmtop"))))
    r = subprocess.run([SYSTEMD_ANALYZE, "verify", str(here)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


# -- TLS and client certificates (prometheus_client's) ----------------------------------------------
def _certs(tmp: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def cert(name, key, issuer_name, issuer_key, *, ca=False, san=None, usage=None):
        b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
             .issuer_name(issuer_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        if usage:
            b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    out = {}

    def write(name, c, key=None):
        out[name] = tmp / f"{name}.pem"
        out[name].write_bytes(c.public_bytes(serialization.Encoding.PEM))
        if key is not None:
            out[name + "-key"] = tmp / f"{name}-key.pem"
            out[name + "-key"].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                             serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tpmtop test CA")])
    write("ca", cert("tpmtop test CA", ca_key, ca_name, ca_key, ca=True))
    sk = ec.generate_private_key(ec.SECP256R1())
    write("server", cert("127.0.0.1", sk, ca_name, ca_key, san=[x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
                         usage=ExtendedKeyUsageOID.SERVER_AUTH), sk)
    ck = ec.generate_private_key(ec.SECP256R1())
    write("client", cert("prometheus", ck, ca_name, ca_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH), ck)
    return out


def test_tls_with_client_certificates(tmp_path):
    import ssl
    import urllib.error
    import urllib.request

    c = _certs(tmp_path)
    exp = Exporter("--no-kernel", "--tls-cert", str(c["server"]), "--tls-key", str(c["server-key"]),
                   "--tls-client-ca", str(c["ca"]))
    try:
        url = exp.url
        assert url.startswith("https://127.0.0.1:")
        ctx = ssl.create_default_context(cafile=str(c["ca"]))
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):  # no client certificate
            urllib.request.urlopen(url, context=ctx, timeout=30).read()
        ctx.load_cert_chain(str(c["client"]), str(c["client-key"]))
        with urllib.request.urlopen(url, context=ctx, timeout=30) as r:
            assert "tpmtop_exporter_info" in r.read().decode()
    finally:
        exp.stop()


def test_garbled_codes_stay_one_label_value():
    """A hostile or garbled trace (random command and response codes) adds no series per value."""
    from prometheus_client import generate_latest

    from tpmtop.exporter.kernel_feed import KernelMetrics
    from tpmtop.exporter.server import new_registry

    reg = new_registry()
    km = KernelMetrics(reg, mark_own=False)
    lines = []
    for i in range(300):
        t = 100 + i * 0.01
        cc = (0x7F000000 + i * 7919).to_bytes(4, "little").hex()  # no such command codes
        lines += [f"  bash-900 [000] .....  {t:.6f}: cmd: (tpm_transmit_cmd+0x0/0x1a0) desc=\"x\"",
                  f"  bash-900 [000] .....  {t + 0.000001:.6f}: tx: (tpm_transmit+0x0/0x3a0) tag=0x180 "
                  f"size=0xe000000 cc=0x{cc}",
                  f"  bash-900 [000] .....  {t + 0.002:.6f}: tx_ret: "
                  "(tpm_transmit_cmd+0x3c/0x1a0 <- tpm_transmit) ret=10",
                  f"  bash-900 [000] .....  {t + 0.002001:.6f}: cmd_ret: (tpm2_foo+0x1/0x2 <- tpm_transmit_cmd) "
                  f"rc={0x10000 + i * 4099}"]
    assert km.feed(lines) == 300
    text = generate_latest(reg).decode()
    assert value(text, "tpmtop_kernel_command_responses_total", command="unknown", rc="other") == 300
    assert len([ln for ln in text.splitlines() if ln.startswith("tpmtop_kernel_command_responses_total")]) == 1
    assert len(km.detector.fails) == 0


def test_boot_facts_of_a_machine_as_gauges():
    """A desktop's saved facts (tests/fixtures/boot/desktop-6.12-systemd): systemd-analyze's
    phases, the TPM units on the critical path (cryptsetup +30.512 s, tpm2-setup +1.044 s),
    IMA's count, the HMAC build — the values its files hold."""
    from prometheus_client import generate_latest

    from tpmtop.exporter.facts_feed import FactsMetrics
    from tpmtop.exporter.server import new_registry

    reg = new_registry()
    FactsMetrics(reg, root=str(REPO / "tests" / "fixtures" / "boot" / "desktop-6.12-systemd")).read_all()
    text = generate_latest(reg).decode()
    assert value(text, "tpmtop_boot_duration_seconds") == pytest.approx(53.118)
    assert value(text, "tpmtop_boot_phase_seconds", phase="userspace") == pytest.approx(41.870)
    assert value(text, "tpmtop_boot_tpm_units_critical_path_seconds") == pytest.approx(30.512 + 1.044)
    assert value(text, "tpmtop_ima_measurements") == 64
    assert value(text, "tpmtop_kernel_config_tpm2_hmac") == 1
    assert value(text, "tpmtop_kernel_pcr_integrity_disabled") == 0
    assert value(text, "tpmtop_host_info", kernel_release="6.12.9-200.fc41.x86_64") == 1
    assert value(text, "tpmtop_tpm_info", family="2.0", driver="tpm_tis") == 1
    # a machine without a TPM has no tpm_info at all (absent, not 0)
    reg = new_registry()
    FactsMetrics(reg, root=str(REPO / "tests" / "fixtures" / "boot" / "vm-no-tpm")).read_all()
    assert "tpmtop_tpm_info" not in generate_latest(reg).decode()
