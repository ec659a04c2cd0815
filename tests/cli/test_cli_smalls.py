"""Issue 24 item 13, the smaller things a fresh-clone try found in the headless commands: each
one as the user sees it (a real ``python -m tpmtop`` subprocess, a real swtpm where a TPM is
involved, the dashboard through Pilot for replay)."""

from __future__ import annotations

import pytest

from tests.helpers.processes import run_tpmtop
from tests.helpers.tui import app_for, main_screen, until


def test_flush_of_an_empty_handle_says_not_loaded():
    """`flush --sim 0x80000000` with nothing loaded printed the TPM's raw 0x1cb text
    (tests/cli/test_handles_cli.py: the same against a swtpm that outlives tpmtop, and a loaded
    handle that is flushed)."""
    r = run_tpmtop("flush", "--sim", "0x80000000")
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("tpmtop: 0x80000000 is not loaded: the TPM holds no object or session there")
    assert "parameter(1)" not in r.stderr


def test_decode_errors_are_prefixed_once():
    for args in (["zz"], ["--cc", "NoSuchCommand", "80"], ["a", "b", "c"]):
        r = run_tpmtop("decode", *args)
        assert r.returncode == 2
        line = r.stderr.strip()
        assert line.count("tpmtop") == 1 and line.startswith("tpmtop: "), line


def test_decode_event_has_no_python_none(tmp_path):
    """Every field of a StartAuthSession and its response decoded from a real capture is
    words or numbers: never Python's None."""
    cap = tmp_path / "c.json"
    r = run_tpmtop("bench", "--sim", "-n", "2", "--warmup", "0", "--modes", "per-command", "--engine", "native",
                   "--events", "--json", str(cap), "-q")
    assert r.returncode == 0, r.stderr
    import json

    events = json.loads(cap.read_text())["events"]
    n = next(i for i, e in enumerate(events) if e["command"] == "TPM2_CC_StartAuthSession")
    out = run_tpmtop("decode", "--event", str(n), str(cap), "--no-hex")
    assert out.returncode == 0, out.stderr
    assert "TPM2B_ENCRYPTED_SECRET" in out.stdout and "None" not in out.stdout


def test_profile_show_words_the_chip():
    r = run_tpmtop("profile", "show", "slb9670")
    assert r.returncode == 0, r.stderr
    chip = next(line for line in r.stdout.splitlines() if line.startswith("# chip:"))
    assert "simulated" not in chip and "False" not in chip and "a real chip" in chip


def test_top_level_help_names_every_export_format():
    r = run_tpmtop("--help")
    flat = " ".join(r.stdout.split())
    assert "Chrome/Perfetto trace, OpenMetrics histograms or a pcapng for Wireshark" in flat


@pytest.mark.parametrize("argv", [["replay", "--help"], ["profile", "--help"], ["compare", "--help"],
                                  ["decode", "--help"], ["export", "--help"]])
def test_commands_without_a_tpm_do_not_explain_choosing_one(argv):
    r = run_tpmtop(*argv)
    assert r.returncode == 0
    assert "TPM selection" not in r.stdout and "exit status" in r.stdout


@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"], ["profile", "record", "--help"],
                                  ["flush", "--help"]])
def test_commands_with_a_tpm_explain_choosing_one(argv):
    r = run_tpmtop(*argv)
    assert "TPM selection: --sim, else -T/--tcti" in " ".join(r.stdout.split())


@pytest.mark.parametrize("typed, line", [
    ("bnech", "tpmtop: unknown command 'bnech': did you mean bench? (see tpmtop --help)"),
    ("expor", "tpmtop: unknown command 'expor': did you mean export or exporter? (see tpmtop --help)"),
])
def test_a_mistyped_command_gets_a_suggestion(typed, line):
    r = run_tpmtop(typed)
    assert r.returncode == 2
    assert r.stderr.strip() == line


def test_a_mistyped_choice_gets_a_suggestion():
    r = run_tpmtop("profile", "shwo", "x")
    assert r.returncode == 2
    assert "did you mean show?" in r.stderr
    r = run_tpmtop("--mode", "per-comand")
    assert r.returncode == 2 and "did you mean per-command?" in r.stderr


def test_a_command_nothing_like_any_lists_them():
    r = run_tpmtop("xyzzy")
    assert r.returncode == 2
    assert "choose from info, handles, flush" in r.stderr and "did you mean" not in r.stderr


@pytest.fixture(scope="module")
def eventless_capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("eventless") / "summary.json"
    r = run_tpmtop("bench", "--sim", "-n", "5", "--warmup", "0", "--modes", "none,per-command",
                   "--engine", "native", "--json", str(path), "-q")
    assert r.returncode == 0, r.stderr
    return path


async def test_replay_without_events_says_how_to_record_them(eventless_capture, tmp_path):
    """The stream said "no commands yet" for a capture that will never have any."""
    from tpmtop.sources.replay import ReplaySource, load

    src = ReplaySource(load(str(eventless_capture)), str(eventless_capture))
    app = app_for(src, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        view = main_screen(app).query_one("#stream-view")
        await until(pilot, lambda: "bench --events" in view.render().plain.replace("\n", " "), what="the note")
        text = view.render().plain.replace("\n", " ")
        assert "no commands yet" not in text
        assert "this capture holds no per-command events" in text


def test_boot_trace_on_tpmtops_own_probe_events_names_the_command_that_reads_them():
    """Item 6's other direction: the three trace readers share --trace, so a kprobe trace given
    to boot is named, with `tpmtop kernel --trace`."""
    path = "tests/fixtures/kernel/trace-6.10-ima-hmac.txt"
    r = run_tpmtop("boot", "--trace", path)
    assert r.returncode == 2
    assert r.stderr.strip() == (f"tpmtop: {path} holds tpmtop's kprobe events, not an ftrace function_graph or "
                                f"bpftrace trace: tpmtop kernel --trace {path} reads it (its --json capture is "
                                "what tpmtop boot --capture prices)")
