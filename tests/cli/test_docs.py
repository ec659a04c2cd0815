"""The documentation: the site builds strictly, and nothing the old README said was lost.

The README became a front door and the rest moved into docs/ (an mkdocs site). The build
runs with --strict, so a broken link, a missing anchor or a page left out of the nav fails
here, inside `make test`, as it fails `make docs`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tpmtop.cli import SUBCOMMANDS as CLI_SUBCOMMANDS

REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
DOCS = REPO / "docs"

# Every heading of the README before it was split (2,420 lines, main at a3d4b67), and the page
# and heading of docs/ that now holds its text. A heading that disappears from its page fails.
OLD_README_HEADINGS = {
    "tpmtop": ("index.md", "tpmtop"),
    "Set-up: two commands": ("setup.md", "Set-up: two commands"),
    "Commands": ("cli.md", "Commands"),
    "How it is built": ("architecture.md", "The layers"),
    "What the transport costs (`benchmarks/overhead.py`)":
        ("benchmarks.md", "What the transport costs (`benchmarks/overhead.py`)"),
    "Does recording show in the tail? (`benchmarks/recorder_tail.py`)":
        ("benchmarks.md", "Does recording show in the tail? (`benchmarks/recorder_tail.py`)"),
    "tpmtop's own cost: the hot path and start-up (issue #28)":
        ("benchmarks.md", "Start-up (`benchmarks/startup.py`)"),
    "The session engine and `tpmtop bench`": ("bench.md", "The session engine and `tpmtop bench`"),
    "Diagnosing a slow boot: tpmtop boot": ("boot.md", "Diagnosing a slow boot: `tpmtop boot`"),
    "Collecting a trace on a real machine": ("boot.md", "Collecting a trace on a real machine"),
    "Chip latency profiles": ("profiles.md", "Chip latency profiles"),
    "Sharing a capture": ("captures.md", "Sharing a capture"),
    "The kernel's own TPM traffic: `tpmtop kernel`": ("kernel.md", "The kernel's own TPM traffic: `tpmtop kernel`"),
    "How the live path is tested: `make test-kernel-vm`": ("testing.md", "The kernel VM: `make test-kernel-vm`"),
    "Fleet: `tpmtop exporter` for Prometheus": ("exporter.md", "Fleet: `tpmtop exporter` for Prometheus"),
    "Real kernels on a slow chip: `tpmtop lab`": ("lab.md", "Real kernels on a slow chip: `tpmtop lab`"),
    "Measured here (2026-12-02)": ("benchmarks.md", "The lab: HMAC at boot on real kernels"),
    "Wireshark and tcti-pcap: `tpmtop export --format pcapng`, `tpmtop import`":
        ("captures.md", "Wireshark and tcti-pcap: `tpmtop export --format pcapng`, `tpmtop import`"),
    "Every command decoded: `tpmtop decode`, and Enter in the dashboard":
        ("decode.md", "Every command decoded: `tpmtop decode`, and Enter in the dashboard"),
    "Which decoder, by measurement (`benchmarks/decode.py`)":
        ("benchmarks.md", "Which decoder (`benchmarks/decode.py`)"),
    "Failure patterns": ("decode.md", "Failure patterns"),
    "Watching other programs: `tpmtop proxy` and `tpmtop run`":
        ("proxy.md", "Watching other programs: `tpmtop proxy`, `tpmtop run`, `tpmtop clients`"),
    "`tpmtop run -- CMD` — strace -c for the TPM": ("proxy.md", "`tpmtop run -- CMD` — strace -c for the TPM"),
    "What the proxy costs (`benchmarks/proxy.py`)": ("benchmarks.md", "What the proxy costs (`benchmarks/proxy.py`)"),
    "What tpmtop will and will not do to your TPM": ("safety.md", "What tpmtop will and will not do to your TPM"),
    "Soak": ("benchmarks.md", "Soak (`benchmarks/soak.py`)"),
    "The dashboard": ("dashboard.md", "The dashboard"),
    "Keys": ("dashboard.md", "Keys"),
    "Observer effect, `--passive` and `--kernel`": ("dashboard.md", "Observer effect, `--passive` and `--kernel`"),
    "Themes": ("dashboard.md", "Themes"),
    "How it holds up under load (`benchmarks/ui_load.py`)":
        ("benchmarks.md", "The dashboard (`benchmarks/ui_load.py`, `refresh_tail.py`)"),
    # the old README's bold run-in headings that now have a heading of their own
    "**Exit status:**": ("safety.md", "Exit status and terminal-safe strings"),
    "**Output files**": ("safety.md", "Output files"),
    "**A busy or silent TPM**": ("safety.md", "A busy or silent TPM"),
    "**The private swtpm never outlives tpmtop.**": ("safety.md", "The private swtpm never outlives tpmtop"),
    "**Signals wait for the TPM command in flight.**": ("safety.md", "Signals wait for the TPM command in flight"),
    "**Who owns the TPM.**": ("architecture.md", "Who owns the TPM"),
    "**How an exchange reaches the recorder.**": ("architecture.md", "How an exchange reaches the recorder"),
    "**Start-up over SSH.**": ("architecture.md", "Start-up over SSH"),
    "**The instrumented transport.**": ("architecture.md", "The instrumented transport"),
    "**The suite under load:**": ("testing.md", "The suite under load: `make test-stress`"),
    "**Big traces.**": ("benchmarks.md", "Big kernel traces (`benchmarks/trace_import.py`)"),
    "**How late a held response is**": ("benchmarks.md", "How late a held response is (`benchmarks/shaper_bias.py`)"),
    "**Export speed**": ("benchmarks.md", "Captures (`benchmarks/export.py`, `capture_rss.py`, `headless_io.py`)"),
    "**What it costs** (`benchmarks/exporter.py`)": ("benchmarks.md", "`tpmtop exporter` (`benchmarks/exporter.py`)"),
    "**Tests.** (the lab)": ("testing.md", "The lab: `make test-lab`"),
    "**How the dashboard reads its data.**": ("dashboard.md", "How the dashboard reads its data"),
    "**Choosing the TPM**": ("cli.md", "Choosing the TPM"),
    "**Serving model: how clients share the TPM.**": ("proxy.md", "Serving model: how clients share the TPM"),
    "**Threat model: who can reach the TPM through tpmtop.**":
        ("proxy.md", "Threat model: who can reach the TPM through tpmtop"),
    "**What it never does to the TPM.** (exporter)": ("exporter.md", "What it never does to the TPM"),
    "**Install the unit.**": ("exporter.md", "Install the unit"),
    "**The metrics**": ("exporter.md", "The metrics"),
    "**The built-in `slb9670` profile.**": ("profiles.md", "The built-in `slb9670` profile"),
    "**Kernel versions.**": ("boot.md", "Kernel versions"),
    "**Hostile captures.**": ("captures.md", "Hostile captures"),
}


def _headings(page: str) -> set[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # a '#' inside a code block is no heading
    return {m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("old", sorted(OLD_README_HEADINGS))
def test_every_section_of_the_old_readme_has_a_place_in_the_docs(old: str) -> None:
    page, heading = OLD_README_HEADINGS[old]
    assert heading in _headings(page), f"{old!r} was carried to {page} under {heading!r}, which is gone"


def test_every_page_is_in_the_nav_and_the_readme_links_only_pages_that_exist() -> None:
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert [p for p in pages if f" {p}" not in nav] == []
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / target).exists(), f"README links {target}, which does not exist"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a broken link or anchor, or a page not in the nav, fails."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "WARNING" not in r.stderr, r.stderr[-3000:]
    built = tmp_path / "site"
    assert (built / "index.html").exists()
    # the schemas are included as they are, not copied by hand
    schemas = (built / "schemas" / "index.html").read_text(encoding="utf-8")
    assert "tpmtop.capture/1" in schemas and "tpmtop.profile/1" in schemas and "tpmtop-decode/1" in schemas
    assert (built / "screenshots" / "live-120x40.svg").exists()


# --- Every command shown in the docs is run -------------------------------------------------
#
# ```console blocks: `$ COMMAND` lines (with `\` continuations, or a quote left open) and the
# output shown under each; ```sh blocks: one command a line, each must exit 0. A block that
# cannot run here has `<!-- doc-test: skip REASON (why) -->` on the line above it.

SKIP_REASONS = {
    "root": "needs root (tracefs, bpftrace, a system's dmesg and journal, building kernels)",
    "kernel": "needs a kernel with kprobe events and a TPM driver",
    "vm": "runs inside the kernel VM's guest",
    "forever": "runs until stopped (the dashboard, the proxy, the exporter)",
    "placeholder": "names files, ports or a TPM the reader supplies",
}
# Commands marked not run, per reason. A new skipped command changes a count here, on purpose:
# nothing leaves the test unnoticed.
EXPECTED_SKIPPED = {"root": 25, "kernel": 2, "vm": 2, "forever": 17, "placeholder": 29}

DOC_FILES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
COMMAND_LANGS = {"console", "sh"}
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
SKIP_MARK = re.compile(r"^<!-- doc-test: skip (\w+) \((.+)\) -->$")
ELLIPSIS = {"…", "...", "(...)"}
SUBCOMMANDS = "|".join(map(re.escape, CLI_SUBCOMMANDS))
# a tpmtop command line (not an output line such as "tpmtop: wrote ..." or "tpmtop boot — ...")
STRAY_COMMAND = re.compile(rf"^\s*(# )?(sudo )?(\w+=\S+ )*(python -m )?tpmtop( +-| *$| +({SUBCOMMANDS})( |$))")


class Block:
    def __init__(self, path: Path, line: int, lang: str, body: list[str], skip: str | None) -> None:
        self.path, self.line, self.lang, self.body, self.skip = path, line, lang, body, skip

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    def commands(self) -> list[tuple[str, list[str]]]:
        """(command, output lines shown under it); for sh blocks the output is not shown."""
        if self.lang == "sh":
            out: list[tuple[str, list[str]]] = []
            pending = ""
            for raw in self.body:
                line = raw.strip()
                if not pending and (not line or line.startswith("#")):
                    continue
                pending = f"{pending}\n{raw}" if pending else line
                if _complete(pending):
                    out.append((pending, []))
                    pending = ""
            assert not pending, f"{self.id}: unfinished command {pending!r}"
            return out
        cmds: list[tuple[str, list[str]]] = []
        i = 0
        while i < len(self.body):
            line = self.body[i]
            if line.startswith("$ "):
                cmd = line[2:]
                while not _complete(cmd):
                    i += 1
                    cmd += "\n" + self.body[i]
                shown: list[str] = []
                i += 1
                while i < len(self.body) and not self.body[i].startswith("$ "):
                    shown.append(self.body[i])
                    i += 1
                cmds.append((cmd, shown))
            else:
                assert not cmds, f"{self.id}: output before the first $ line"
                i += 1
        return cmds


def _complete(cmd: str) -> bool:
    if cmd.rstrip().endswith("\\"):
        return False
    try:
        import shlex

        shlex.split(cmd, comments=True)
    except ValueError:  # a quote still open: the command goes on on the next line
        return False
    return True


def _blocks() -> list[Block]:
    blocks = []
    for path in DOC_FILES:
        lines = path.read_text(encoding="utf-8").split("\n")
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            lang, start = m.group(2), i
            body = []
            i += 1
            while not FENCE.match(lines[i]):
                body.append(lines[i][len(m.group(1)):])
                i += 1
            i += 1
            above = lines[start - 1].strip() if start else ""
            mark = SKIP_MARK.match(above)
            blocks.append(Block(path, start + 1, lang, body, mark.group(1) if mark else None))
    return blocks


BLOCKS = _blocks()
RUN_BLOCKS = [b for b in BLOCKS if b.lang in COMMAND_LANGS and b.skip is None]


def test_every_fence_says_what_it_holds_and_every_skip_is_counted() -> None:
    bare = [b.id for b in BLOCKS if not b.lang]
    assert bare == [], "a fence without a language (console, sh for commands; text, yaml, json... for the rest)"
    # a command written outside a console/sh block would escape the test
    stray = [f"{b.id}: {line}" for b in BLOCKS if b.lang not in COMMAND_LANGS
             for line in b.body if re.match(r"^\s*\$ \S", line) or STRAY_COMMAND.match(line)]
    assert stray == [], "commands outside a console or sh block"
    marks = [(path.name, line.strip()) for path in DOC_FILES
             for line in path.read_text(encoding="utf-8").split("\n") if line.strip().startswith("<!-- doc-test")]
    bad = [m for m in marks if not (ok := SKIP_MARK.match(m[1])) or ok.group(1) not in SKIP_REASONS]
    assert bad == [], f"skip marks need a reason from {sorted(SKIP_REASONS)} and a why: {bad}"
    skipped: dict[str, int] = {}
    for b in BLOCKS:
        if b.skip:
            assert b.lang in COMMAND_LANGS, f"{b.id}: a skip mark above a block that holds no commands"
            skipped[b.skip] = skipped.get(b.skip, 0) + len(b.commands())
    ran = sum(len(b.commands()) for b in RUN_BLOCKS)
    print(f"doc commands: {ran} run, skipped {skipped}")
    assert ran >= 30
    assert skipped == EXPECTED_SKIPPED


_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_UNIT = re.compile(r"#\s?(?:ns|µs|us|ms|s|MB|KB|GB|MiB|KiB|%)(?![\w])")


def shape(line: str) -> str:
    """A line with what changes from run to run masked: numbers, hex, durations and their units,
    table widths (runs of spaces and dashes)."""
    s = re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
    s = re.sub(r"\b0x[0-9a-fA-F]+\b", "#", s)
    s = re.sub(r"\b[0-9a-fA-F]{8,}\b", "#", s)
    s = _NUMBER.sub("#", s)
    s = _UNIT.sub("#t", s)
    s = re.sub(r"#(?:[.:/,-]#)+", "#", s)
    s = re.sub(r"-{2,}", "-", s)
    return re.sub(r"\s+", " ", s)


@pytest.fixture(scope="module")
def tpmtop_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `tpmtop` on PATH that is this tree's, run by this interpreter."""
    bin_dir = tmp_path_factory.mktemp("doc-bin")
    exe = bin_dir / "tpmtop"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -m tpmtop "$@"\n')
    exe.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=[b.id for b in RUN_BLOCKS])
def test_the_command_shown_still_gives_the_output_shown(block: Block, tpmtop_bin: Path, tmp_path: Path) -> None:
    """Run each command of the block in a scratch folder (tests/ being the repository's), against
    a private swtpm when it names `--sim`, and check every output line shown is in what it printed
    (numbers, times and widths masked). `$ echo $?` checks the previous command's exit status."""
    (tmp_path / "tests").symlink_to(REPO / "tests")
    env = dict(os.environ, PATH=f"{tpmtop_bin}:{os.environ['PATH']}", PYTHONPATH=str(REPO), NO_COLOR="1",
               TERM="dumb", COLUMNS="200")
    env.pop("TPM2TOOLS_TCTI", None)
    commands = block.commands()
    status = 0
    for i, (cmd, shown) in enumerate(commands):
        if cmd.strip() == "echo $?":
            expect = [s.strip() for s in shown if s.strip()]
            assert expect == [str(status)], f"{block.id}: exit status {status}, the doc shows {expect}"
            continue
        status, output = _run(cmd, tmp_path, env)
        got = {shape(line) for line in output.split("\n")}
        wanted = [s for s in shown if s.strip() and s.strip() not in ELLIPSIS]
        missing = [s for s in wanted if shape(s) not in got]
        assert not missing, (f"{block.id}: `{cmd}` no longer prints (masked) {missing[:5]}\n"
                             f"--- it printed (exit {status}):\n{output[-4000:]}")
        status_shown = i + 1 < len(commands) and commands[i + 1][0].strip() == "echo $?"
        if not status_shown:
            assert status == 0, f"{block.id}: `{cmd}` exited {status}:\n{output[-3000:]}"


def _run(cmd: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """bash -c CMD in its own process group, stdout and stderr together; whatever it started is
    killed if it outlives the time-out (a tpmtop takes its private swtpm with it)."""
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, out


@pytest.mark.parametrize("page", ["README.md", "docs/cli.md"])
def test_every_subcommand_is_in_the_command_tables(page: str) -> None:
    text = (REPO / page).read_text(encoding="utf-8")
    assert [name for name in CLI_SUBCOMMANDS if f"| `tpmtop {name}" not in text] == []


def test_the_benchmarks_page_names_every_benchmark_in_at_most_300_lines() -> None:
    """docs/benchmarks.md tells the current figures, not a dated notebook (issue 39): short, and
    every script in benchmarks/ (but the machine-naming helper) has its figure there."""
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert len(page.splitlines()) <= 300
    scripts = sorted(p.name for p in (REPO / "benchmarks").glob("*.py") if p.name != "machine.py")
    assert [s for s in scripts if s not in page] == []


def test_the_panel_keys_the_docs_name_are_the_dashboards():
    """Issue 55 item 6: Health is key 9 (PCRs took 8) while the README, docs/health.md and
    docs/dashboard.md said 8. Every "**Panel** (key `N`" and the README's keys row are read
    against the dashboard's own panel list."""
    from tpmtop.tui.panels import PANELS

    keys = {p.title: p.key for p in PANELS}
    texts = {path: path.read_text(encoding="utf-8") for path in [REPO / "README.md", *DOCS.glob("*.md")]}
    named = [(path.name, title, key) for path, text in texts.items()
             for title, key in re.findall(r"\*\*(\w+)\*\*(?: panel)? \(key `(\w)`", text)]
    assert named, "no panel key named in the docs"
    assert [n for n in named if keys.get(n[1]) != n[2]] == []
    row = next(ln for ln in texts[REPO / "README.md"].splitlines() if ln.startswith("| `1`–"))
    digits = [p for p in PANELS if p.key.isdigit()]
    letters = [p for p in PANELS if not p.key.isdigit()]  # Unlock's `u`: a panel past the digits
    head = f"| `1`–`{len(digits)}`" + "".join(f", `{p.key}`" for p in letters) + " "
    assert row.startswith(head) and ", ".join(p.title for p in digits) in row, row
    assert all(p.title in row for p in letters), row
