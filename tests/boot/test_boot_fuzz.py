"""Hypothesis over #16's parsers: systemd-analyze blame and critical-chain, the journal, the
kernel log's TPM facts, and `tpmtop boot` end to end on a tree whose saved outputs are mutated.

Bad input is exit 2 with one line ``FILE:LINE: why``; nothing else (no exit 1, no traceback)."""

import contextlib
import io
import re
import shutil

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.paths import TESTS
from tpmtop.boot.dmesg import parse_kernel_log
from tpmtop.boot.journal import parse_journal
from tpmtop.boot.systemd import parse_blame, parse_critical_chain
from tpmtop.cli import main
from tpmtop.errors import UsageError

SET = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
D = TESTS / "fixtures" / "boot" / "desktop-6.12-systemd"
SAVED = {name: (D / "run/tpmtop" / name).read_text()
         for name in ("journal.txt", "systemd-analyze-blame.txt", "systemd-analyze-critical-chain.txt", "dmesg.txt")}
FILE_LINE = re.compile(r"^(?P<line>\d+): \S")


def _edit(text: str, data) -> str:
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, max(0, len(lines) - 1)))
        line = lines[i] if lines else ""
        j = data.draw(st.integers(0, len(line)))
        new = line[:j] + data.draw(st.text(max_size=12)) + line[j + data.draw(st.integers(0, 6)):]
        if lines:
            lines[i] = new
        else:
            lines.append(new)
    return "\n".join(lines) + "\n"


def _only_file_line(fn, text: str, path: str) -> None:
    try:
        fn(text, path)
    except UsageError as e:
        msg = str(e)
        assert msg.startswith(path + ":"), msg
        m = FILE_LINE.match(msg[len(path) + 1:])
        assert m, msg
        assert 1 <= int(m.group("line")) <= max(1, len(text.splitlines())), msg


PARSERS = {"systemd-analyze-blame.txt": parse_blame, "systemd-analyze-critical-chain.txt": parse_critical_chain,
           "journal.txt": parse_journal}


@settings(max_examples=300, **SET)
@given(data=st.data(), name=st.sampled_from(sorted(PARSERS)))
def test_mutated_saved_outputs_parse_or_name_the_line(data, name):
    _only_file_line(PARSERS[name], _edit(SAVED[name], data), name)


@settings(max_examples=200, **SET)
@given(text=st.text(max_size=400), name=st.sampled_from(sorted(PARSERS)))
def test_arbitrary_text_parses_or_names_the_line(text, name):
    _only_file_line(PARSERS[name], text, name)


@settings(max_examples=200, **SET)
@given(data=st.data())
def test_kernel_log_with_mutated_tpm_lines_never_fails(data):
    log = parse_kernel_log(_edit(SAVED["dmesg.txt"], data))
    for p in log.probes:
        assert p.family in ("1.2", "2.0") and p.device_id >= 0
    for p in log.problems:
        assert p.rc is None or p.rc >= 0


@settings(max_examples=40, **SET)
@given(data=st.data(), name=st.sampled_from(sorted(SAVED)))
def test_boot_end_to_end_is_0_or_2_with_file_line(tmp_path_factory, data, name):
    root = tmp_path_factory.mktemp("tree") / "root"
    shutil.copytree(D, root)
    target = root / "run/tpmtop" / name
    target.write_text(_edit(SAVED[name], data))
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["boot", "--root", str(root)])
    assert rc in (0, 2), err.getvalue()
    if rc == 2:
        line = err.getvalue().strip()
        assert "\n" not in line and f"{target}:" in line and "Traceback" not in line
