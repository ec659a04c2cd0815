"""`tpmtop --kernel` (issue 14 part 1): the kernel's own TPM commands live in the dashboard.

The probes cannot be armed on this project's machines (no CONFIG_KPROBES); what they write is
the trace_pipe text of Documentation/trace/ftrace.rst's output format, and the dashboard reads
it from a file or FIFO exactly as from tpmtop's own tracefs instance (``--kernel-trace``).
The fixtures are that format: a 6.10 kernel (a fresh salted session per extend, no operation
probes) and a 6.12 kernel (a kept session that a user-space command ends), with the
tpm2_pcr_extend/tpm2_get_random operation events. Nothing here talks to a TPM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.paths import REPO, TESTS
from tests.helpers.processes import REPO, TPMTOP
from tests.helpers.tui import SIZE, app_for, header_text, main_screen, until
from tpmtop.kernel.tap import KernelTap
from tpmtop.sources.kernel import KernelSource
from tpmtop.sources.passive import Sysfs

FIX = TESTS / "fixtures" / "kernel"
KEPT = (FIX / "trace-6.12-kept-session-ops.txt").read_text()
PER_COMMAND = (FIX / "trace-6.10-ima-hmac.txt").read_text()


@pytest.fixture
def kernel(tmp_path):
    """A KernelSource following a trace file in tmp_path; the file starts empty."""
    made = []

    def make(name: str = "trace_pipe.txt"):
        path = tmp_path / name
        path.write_text("")
        # followed as it is written, as the dashboard's --kernel-trace follows one
        tap = KernelTap(trace_path=str(path), poll_s=0.05, this_machine_now=True).start()
        src = KernelSource(tap, Sysfs(tmp_path))  # an empty sysfs: no TPM files here
        made.append(src)
        return src, path

    yield make
    for src in made:
        src.close()


def _append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def _labels(table) -> dict[str, list]:
    return {str(cells[0]).strip(): cells for cells in table._shadow.values()}


def _modes_text(app) -> str:
    return str(main_screen(app).query_one("#bars").render())


class TestKernelDashboard:
    async def test_a_kept_session_kernel_is_named_and_its_extends_split_into_tpm_and_host(self, kernel, tmp_path):
        """The 6.12 trace, written in two halves as the kernel would: each command's row, the
        extend priced whole (TPM + host), the session behaviour and what ended the session."""
        src, path = kernel()
        lines = KEPT.splitlines(keepends=True)
        half = next(i for i, line in enumerate(lines) if "op_random:" in line)  # before the hwrng read
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            _append(path, "".join(lines[:half]))
            table = main_screen(app).query_one("#latency-table")
            await until(pilot, lambda: "op:total" in table._shadow, what="the extend's operation rows")
            await until(pilot, lambda: "3 extends" in header_text(app), what="three extends counted")
            assert "user" not in " ".join(_labels(table))  # nothing from user space yet
            _append(path, "".join(lines[half:]))
            await until(pilot, lambda: "5 extends" in header_text(app), what="five extends counted")
            await until(pilot, lambda: "set-ups after" in _modes_text(app), what="the session verdict")
            rows = _labels(table)
            # one row per (command, kernel path): the FlushContext of a set-up and the one that
            # ended the kept session are different things
            assert {"PCR_Extend", "ContextLoad", "StartAuthSession", "FlushContext · set-up", "FlushContext · end",
                    "GetRandom · hwrng", "PCR_Read · user"} <= set(rows), sorted(rows)
            assert str(rows["PCR_Extend"][1]).strip() == "5" and str(rows["FlushContext · end"][1]).strip() == "1"
            assert str(table._shadow["op:total"][1]).strip() == "5"  # five extend operations
            modes = _modes_text(app)
            assert "▶reuse" in " ".join(modes.split())
            assert main_screen(app).query_one("#modes").border_title.startswith("Modes · kernel ·")
            assert "kept session: 2 of 5 extends set one up" in " ".join(modes.split())
            assert "user space (tpm2_pcrread) ×1" in " ".join(modes.split())
            header = header_text(app)
            assert "tpmtop sends no TPM command" in header and "14 kernel commands" in header
            # a saved trace may be another machine's: this machine's sysfs is not shown beside it
            assert not main_screen(app).query_one("#system").display
            # the operation rows: the host share is what is left of the extend besides its commands
            op = next(r for r in src.runs() if r.op == "extend")
            assert op.ops == 5 and op.host_us["p50"] > 0
            assert op.op_us["p50"] == pytest.approx(op.wire_us["p50"] + op.host_us["p50"], rel=0.01)

    async def test_a_per_command_kernel_without_operation_probes(self, kernel, tmp_path):
        """6.10: a set-up in every extend, assembled from the commands (no operation events),
        and said to be timed from the first command to the last."""
        src, path = kernel()
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            _append(path, PER_COMMAND)
            await until(pilot, lambda: "per-command" in _modes_text(app), what="the verdict")
            modes = " ".join(_modes_text(app).split())
            assert "a fresh salted session in each of 2 extends" in modes
            assert "no operation probes" in modes
            # the boot projection is priced from this kernel's own set-up and extend
            assert "boot, 1,000 extends" in modes and "per-command" in modes
            run = next(r for r in src.runs() if r.op == "extend")
            assert run.commands_per_op == {"TPM2_CC_ContextLoad": 1.0, "TPM2_CC_StartAuthSession": 1.0,
                                           "TPM2_CC_FlushContext": 1.0, "TPM2_CC_PCR_Extend": 1.0}

    async def test_enter_on_a_kernel_row_says_what_is_known(self, kernel, tmp_path):
        """The probes read only the header: the decode view says so and shows what they saw."""
        src, path = kernel()
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            _append(path, KEPT)
            await until(pilot, lambda: "5 extends" in header_text(app), what="the trace")
            await pilot.press("5")  # the stream; its newest row is the last PCR_Extend
            await pilot.pause(0.3)
            await pilot.press("enter")
            await until(pilot, lambda: app.screen.__class__.__name__ == "DecodeScreen", what="the decode view")
            body = " ".join(str(app.screen.query_one("#decode-body").render()).split())
            assert "only the command's header" in body
            assert "TPM2_CC_PCR_Extend (0x182), 121 bytes" in body and "bash-1300" in body

    async def test_export_writes_a_capture_that_prices_the_kernels_extends(self, kernel, tmp_path):
        """x: the kernel's commands and operations as a capture; tpmtop boot --capture prices
        per-command/reuse from this kernel's own extends, and replay loads it."""
        src, path = kernel()
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            _append(path, KEPT)
            await until(pilot, lambda: "5 extends" in header_text(app), what="the trace")
            await pilot.press("x")
            await until(pilot, lambda: list(tmp_path.glob("tpmtop-*.json")), what="the capture file")
        cap_path = next(tmp_path.glob("tpmtop-*.json"))
        cap = json.loads(cap_path.read_text())
        runs = {(r["engine"], r["mode"], r["op"]): r for r in cap["runs"]}
        ext = runs[("kernel", "reuse", "extend")]
        assert ext["ops"] == 5 and ext["commands_per_op"]["TPM2_CC_PCR_Extend"] == 1.0
        assert ext["commands_per_op"]["TPM2_CC_StartAuthSession"] == pytest.approx(0.4)
        assert runs[("observed", "kernel", "command")]["ops"] == 14
        # all but the session end and the user-space PCR_Read
        assert len(cap["ops"]) == 6 and sum(e["op_seq"] is not None for e in cap["events"]) == 12
        (tmp_path / "empty-root").mkdir()
        r = subprocess.run(TPMTOP + ["boot", "--capture", str(cap_path), "--extends", "1000", "--root",
                                     str(tmp_path / "empty-root")], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        reuse = next(line for line in r.stdout.splitlines() if line.strip().startswith("reuse "))
        assert "N × (capture p50 for this mode)" in reuse  # this kernel's own kept-session extends
        assert "only ESAPI" not in r.stdout + r.stderr
        from tpmtop.sources.replay import ReplaySource, load

        rs = ReplaySource(load(cap_path), cap_path)
        assert ("kernel", "reuse", "extend") in [r.key for r in rs.runs()]

    async def test_tpmtop_own_sysfs_reads_are_marked(self, kernel, tmp_path):
        """A command the kernel sent for one of tpmtop's threads (the System panel reads PCR
        files: the kernel sends PCR_Read) is shown as tpmtop's own, not as the kernel's."""
        src, path = kernel()
        me = threading.get_native_id()
        own = (f"          python-{me}    [000] .....   300.000000: cmd: (tpm_transmit_cmd+0x0/0x1a0) "
               'desc="attempting to read a pcr value"\n'
               f"          python-{me}    [000] .....   300.000002: tx: (tpm_transmit+0x0/0x3a0) tag=0x180 "
               "size=0x14000000 cc=0x7e010000\n"
               f"          python-{me}    [000] .....   300.005000: tx_ret: (tpm_transmit_cmd+0x3c/0x1a0 <- "
               "tpm_transmit) ret=10\n"
               f"          python-{me}    [000] .....   300.005003: cmd_ret: (tpm2_pcr_read+0x1a4/0x260 <- "
               "tpm_transmit_cmd) rc=0\n")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            _append(path, own)
            table = main_screen(app).query_one("#latency-table")
            await until(pilot, lambda: "PCR_Read · tpmtop" in _labels(table), what="tpmtop's own PCR_Read")
            assert src.tap.commands[-1].path == "tpmtop's own: PCR read [tpm2_pcr_read]"


# -- the command line -------------------------------------------------------------------------
def _in_a_terminal(argv: list[str]) -> subprocess.CompletedProcess:
    """tpmtop with a pseudo-terminal as stdin/stdout (the dashboard wants one), stderr piped."""
    import pty

    master, slave = pty.openpty()
    try:
        env = {k: v for k, v in os.environ.items() if k != "TPM2TOOLS_TCTI"}
        p = subprocess.Popen(TPMTOP + argv, stdin=slave, stdout=slave, stderr=subprocess.PIPE, text=True,
                             cwd=REPO, env=env)
        try:
            err = p.communicate(timeout=60)[1]
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        return subprocess.CompletedProcess(p.args, p.returncode, "", err)
    finally:
        os.close(master)
        os.close(slave)


def _cannot_trace() -> str | None:
    from tpmtop.kernel import probes

    try:
        probes.find_tracefs()
    except probes.KernelTraceError as e:
        return str(e)
    return None


@pytest.mark.skipif(_cannot_trace() is None, reason="this machine can trace its kernel: --kernel would start")
def test_kernel_where_tracing_is_impossible_is_one_line_exit_1():
    r = _in_a_terminal(["--kernel"])
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == f"tpmtop: {_cannot_trace()}"


@pytest.mark.skipif(_cannot_trace() is None, reason="this machine can trace its kernel")
def test_passive_where_tracing_is_impossible_shows_sysfs_and_says_why():
    from argparse import Namespace

    from tpmtop.cli.dashboard_args import watch_source
    from tpmtop.sources.passive import PassiveSource

    src, notices = watch_source(Namespace(kernel=False, passive=True, kernel_trace=None))
    assert isinstance(src, PassiveSource)
    assert notices == [f"sysfs only, no live kernel TPM commands: {_cannot_trace()}"]


def test_kernel_trace_picks_the_kernel_source_and_sends_nothing(tmp_path):
    from argparse import Namespace

    from tpmtop.cli.dashboard_args import watch_source

    f = tmp_path / "t.txt"
    f.write_text(KEPT)
    src, notices = watch_source(Namespace(kernel=True, passive=False, kernel_trace=str(f)))
    try:
        assert isinstance(src, KernelSource) and notices == []
        assert not src.caps.handles and not src.caps.workload and not src.caps.changes_tpm
        assert src.tap.probes is None  # nothing armed, nothing sent: a file is read
    finally:
        src.close()


@pytest.mark.parametrize("argv, message", [
    (["--kernel", "--sim"], "--kernel sends nothing to any TPM: it cannot be combined with --sim or -T"),
    (["--kernel", "--kernel-trace", "/nonexistent/trace"], "--trace /nonexistent/trace: no such file"),
    (["--kernel", "--kernel-trace", "tests"], "--trace tests: not a file or a pipe"),
    # --trace (or its older name --kernel-trace) implies --kernel: checked as --kernel is
    (["--trace", "/nonexistent/trace"], "--trace /nonexistent/trace: no such file"),
    (["--kernel-trace", "/nonexistent/trace"], "--trace /nonexistent/trace: no such file"),
    (["--trace", str(FIX / "trace-6.10-ima-hmac.txt"), "--sim"],
     "--kernel sends nothing to any TPM: it cannot be combined with --sim or -T"),
    (["--trace", str(FIX / "trace-6.10-ima-hmac.txt"), "boot"],
     "--trace before `boot` opens the dashboard on a trace; for `tpmtop boot` put it after the command"),
])
def test_kernel_bad_usage_is_exit_2(argv, message):
    r = subprocess.run(TPMTOP + argv, cwd=REPO, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"tpmtop: {message}"


def test_trace_alone_implies_kernel_and_reaches_the_terminal_check():
    """`tpmtop --trace FILE` is `tpmtop --kernel --trace FILE`: not refused for want of
    --kernel; without a terminal it stops where --kernel does, naming the headless command."""
    for flag in ("--trace", "--kernel-trace"):
        r = subprocess.run(TPMTOP + [flag, str(FIX / "trace-6.10-ima-hmac.txt")], cwd=REPO, capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert r.returncode == 2, r.stderr
        assert "the dashboard needs a terminal" in r.stderr and "tpmtop kernel" in r.stderr


FOREIGN = [("/work/shared/fixtures/ftrace-graph-extend-hmac-slb9670.txt", "an ftrace function_graph trace"),
           ("/work/shared/fixtures/bpftrace-ima-extend-hmac.txt", "bpftrace map output")]


@pytest.mark.parametrize("path, what", [f for f in FOREIGN if Path(f[0]).exists()])
def test_kernel_trace_of_another_kind_names_it_and_boot(path, what):
    """`tpmtop kernel --trace` (and its older name) on a function_graph or bpftrace file: exit 2,
    saying what the file is and which command reads it."""
    for flag in ("--trace", "--from-trace"):
        r = subprocess.run(TPMTOP + ["kernel", flag, path, "-q"], cwd=REPO, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip() == (f"tpmtop: {path} holds no tpmtop kprobe events: it is {what}, which "
                                    f"tpmtop boot --trace {path} reads")


@pytest.mark.parametrize("path, what", [f for f in FOREIGN if Path(f[0]).exists()])
async def test_dashboard_on_a_trace_of_another_kind_says_so(kernel, tmp_path, path, what):
    """Issue 24 item 6: a function_graph file under --kernel --trace showed "no commands yet"
    for ever. The stream and the Modes panel say what the file is and point at tpmtop boot."""
    src, fifo_path = kernel()
    app = app_for(src, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        _append(fifo_path, Path(path).read_text())
        screen = main_screen(app)
        await until(pilot, lambda: "tpmtop boot --trace" in screen.query_one("#stream-view").render().plain
                    .replace("\n", " "), what="the stream's note")
        text = screen.query_one("#stream-view").render().plain.replace("\n", " ")
        assert f"this file is {what}, not tpmtop kprobe events" in text
        assert "no commands yet" not in text
        await until(pilot, lambda: what in _modes_text(app).replace("\n", " ") or
                    what in str(screen.query_one("#modes").render()), what="the Modes note", timeout=10)


def test_headless_kernel_import_never_loads_textual():
    code = ("import sys; import tpmtop.kernel.tap, tpmtop.sources.kernel, tpmtop.kernel.capture; "
            "print('textual' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (140, 40), (200, 50)])
async def test_task_names_are_text_never_markup_nor_terminal_codes(kernel, tmp_path, size):
    """A task names itself (prctl): `x[`, a markup tag, a title-setting escape. Shown as text
    at every width — no MarkupError from a "[" cut at a column's end (it once paired with the
    next line's tag and ended the dashboard), no escape sequence reaching the terminal."""
    src, path = kernel()
    hostile = KEPT.replace("bash-1200", "x[-1200").replace("bash-1300", "\x1b]0;pwned\x07-1300") \
        .replace("systemd-1 ", "[reverse]y[/reverse][-1 ")
    app = app_for(src, tmp_path)
    async with app.run_test(size=size) as pilot:
        _append(path, hostile)
        await until(pilot, lambda: "5 extends" in header_text(app), what="the trace")
        await pilot.press("5")  # the stream (a tab at 80×24)
        await pilot.pause(0.5)
        screen = main_screen(app)
        text = screen.query_one("#stream-view").render().plain
        assert "\x1b" not in text and "\\x1b]0;pwned\\x07" in "".join(c.comm for c in src.tap.commands)
        assert any("x[-1200" in r.handles for r in screen.query_one("#stream").buffer)
        assert app.is_running


REAL_612 = (FIX / "trace-6.12-debian-qemu-tpmrm.txt").read_text()
TGID_515 = (FIX / "trace-5.15-tgid-extend.txt").read_text()


class TestKernelDashboardHonesty:
    async def test_no_host_row_where_no_host_time_can_be_seen(self, kernel, tmp_path):
        """A real 6.12 trace without operation events: each extend is its PCR_Extend alone, so
        there is no host time to show — no `host` row (it read 1.0 µs, the histogram's floor)."""
        src, path = kernel()
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            _append(path, REAL_612)
            table = main_screen(app).query_one("#latency-table")
            await until(pilot, lambda: "op:total" in table._shadow, what="the extend rows")
            assert "op:wire" in table._shadow and "op:host" not in table._shadow
            assert "its host time not seen" in " ".join(_modes_text(app).split())

    async def test_lost_events_are_said_where_they_stay(self, kernel, tmp_path):
        """The 5.15 trace has a CPU:0 [LOST 4 EVENTS] marker: the Modes panel says commands are
        missing (the header, cut at the terminal's width, could not be relied on)."""
        src, path = kernel()
        app = app_for(src, tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            _append(path, TGID_515)
            await until(pilot, lambda: src.tap.parser.lost == 4, what="the lost events")
            await pilot.press("4")
            await until(pilot, lambda: "4 trace events lost" in " ".join(_modes_text(app).split()),
                        what="the note in Modes")

    async def test_the_resource_managers_expected_0x910_is_no_failure(self, kernel, tmp_path):
        """The real 6.12 trace's three ContextSave answered TPM_RC_REFERENCE_H0: the kernel's
        expected answer for a session the TPM had already ended. No errors, no pattern alert."""
        src, path = kernel()
        seen = []
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
            _append(path, REAL_612)
            table = main_screen(app).query_one("#latency-table")
            await until(pilot, lambda: "ContextSave · rm" in _labels(table), what="the resource manager's rows")
            await pilot.pause(1.2)
            assert str(_labels(table)["ContextSave · rm"][2]).strip() in ("", "0")  # the errors column
            assert not main_screen(app).dash.alerts.current
            assert not any("failure pattern" in str(getattr(m, "title", "")) for m in seen)

    async def test_export_before_any_command_says_why(self, kernel, tmp_path):
        src, _ = kernel()
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("x")
            await pilot.pause(0.3)
            assert any("no kernel command seen" in n.text for n in app.message_log.items)
            assert not list(tmp_path.glob("tpmtop-*.json"))


def test_a_kernel_capture_is_not_exported_to_pcapng_for_the_wrong_reason(tmp_path):
    out = tmp_path / "k.json"
    r = subprocess.run(TPMTOP + ["kernel", "--from-trace", str(FIX / "trace-6.10-ima-hmac.txt"), "-q", "--json",
                                 str(out)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    cap = json.loads(out.read_text())
    assert cap["host"]["kernel"] == "unknown"  # a saved trace: not this machine's kernel
    r = subprocess.run(TPMTOP + ["export", str(out), "--format", "pcapng", "-o", str(tmp_path / "k.pcapng")],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "the probes read only each command's header, so there are no bytes to put in a pcapng" in r.stderr


@pytest.mark.skipif(_cannot_trace() is None, reason="this machine can trace its kernel")
def test_passive_keeps_saying_why_there_is_no_kernel_traffic():
    from argparse import Namespace

    from tpmtop.cli.dashboard_args import watch_source

    src, _ = watch_source(Namespace(kernel=False, passive=True, kernel_trace=None))
    assert src.header().marker == f"no live kernel TPM commands: {_cannot_trace()}"


class TestKernelHelp:
    async def test_help_names_the_keys_this_view_has_not_instead_of_listing_them(self, kernel, tmp_path):
        """? on the kernel view: no workload or flush key is listed as if it acted; they are
        named in one line with the reason (tpmtop sends nothing to the TPM here), and the
        panel keys are the panels it has."""
        from tpmtop.tui.screens.help import HelpScreen

        src, _path = kernel()
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen")
            text = str(app.screen.query_one("#help-text").render())
            assert "workload: Pause or resume" not in text and "handle: Flush selected" not in text
            assert "Switch to next mode" not in text
            assert "not in this view: space m e o + - f i F" in " ".join(text.split())
            assert "tpmtop sends nothing to the TPM" in " ".join(text.split())
            # only the panels this view has
            assert "show a panel: 3 Latency, 4 Modes, 5 Stream" in text and "1 Handles" not in text
            # what the view does have is still there
            for still in ("  x  ", "  /  ", "  p  ", "  q  "):
                assert still in text, (still, text)


class TestKernelProjection:
    async def test_p_prices_with_the_kernels_commands_and_asks_for_no_mode_run(self, kernel, tmp_path):
        """p on the kernel view: priced with the kernel's own p50s; a component the kernel never
        sent (an extend without a session) is 'not seen', not 'run that mode' — no mode can be
        run here."""
        from tpmtop.tui.screens.projection import ProjectionScreen

        src, path = kernel()
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            _append(path, KEPT)
            await until(pilot, lambda: "5 extends" in header_text(app), what="five extends counted")
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, ProjectionScreen), what="the projection")
            text = " ".join(str(app.screen.query_one("#projection-text").render()).split())
            assert "priced with the kernel's own per-command p50s" in text
            assert "E0 PCR_Extend not seen: the kernel sent none" in text
            assert "run that mode" not in text


def test_projection_arithmetic_wraps_under_its_own_column():
    """A long line of arithmetic, wrapped at the box's width, continues under the formula's
    column (no-break indent), not at the mode names' column."""
    from tpmtop.tui.screens.projection import INDENT, projection_markup

    comps = {"E0": 6000.0, "L": 36995.071, "S": 84803.583, "F": 3196.927, "Eh": 24363.007}
    lines = projection_markup(comps, 1000, "set here", "test", width=60).splitlines()
    saved = lines.index(next(line for line in lines if line.startswith("[b]saved")))
    under = lines[saved + 1:lines.index("", saved)]
    assert len(under) >= 3  # the arithmetic really wrapped at 60
    assert all(line.startswith("\u00a0" * INDENT) and len(line) <= INDENT + 60 + 10 for line in under), under


class TestHistogram:
    async def test_kept_session_and_set_up_extends_stay_apart(self, kernel, tmp_path):
        """The 6.12 trace: three kept-session extends (24 ms) and two that set a session up
        (151 ms). The extend's histogram shows every bucket between them, the empty ones
        drawn empty, so the two groups never look contiguous; and the slowest on one unit."""
        import re

        from tests.helpers.tui import HIST_LINE, histogram_counts

        src, path = kernel()
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            _append(path, KEPT)
            await until(pilot, lambda: "5 extends" in header_text(app), what="the trace")
            main_screen(app).query_one("#latency-table").focus()
            hist = main_screen(app).query_one("#histogram")
            await until(pilot, lambda: sum(histogram_counts(str(hist.render()))) == 5, what="the extend's histogram")
            text = str(hist.render())
            counts = histogram_counts(text)
            assert counts[0] == 3 and counts[-1] == 2 and 0 in counts[1:-1], text  # a gap between them
            assert len(counts) <= hist.content_size.height - 1
            assert {m.group(2) for m in re.finditer(HIST_LINE, text, re.M)} == {"ms"}, text
            assert "max 151 ms" in text.splitlines()[0], text
