"""The documentation: the site builds strictly, and nothing the old README said was lost.

The README became a front door and the rest moved into docs/ (an mkdocs site). The build
runs with --strict, so a broken link, a missing anchor or a page left out of the nav fails
here, inside `make test`, as it fails `make docs`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
        ("benchmarks.md", "tpmtop's own cost: the hot path and start-up (issue #28)"),
    "The session engine and `tpmtop bench`": ("bench.md", "The session engine and `tpmtop bench`"),
    "Diagnosing a slow boot: tpmtop boot": ("boot.md", "Diagnosing a slow boot: `tpmtop boot`"),
    "Collecting a trace on a real machine": ("boot.md", "Collecting a trace on a real machine"),
    "Chip latency profiles": ("profiles.md", "Chip latency profiles"),
    "Sharing a capture": ("captures.md", "Sharing a capture"),
    "The kernel's own TPM traffic: `tpmtop kernel`": ("kernel.md", "The kernel's own TPM traffic: `tpmtop kernel`"),
    "How the live path is tested: `make test-kernel-vm`": ("testing.md", "The kernel VM: `make test-kernel-vm`"),
    "Fleet: `tpmtop exporter` for Prometheus": ("exporter.md", "Fleet: `tpmtop exporter` for Prometheus"),
    "Real kernels on a slow chip: `tpmtop lab`": ("lab.md", "Real kernels on a slow chip: `tpmtop lab`"),
    "Measured here (2026-12-02)": ("benchmarks.md", "The lab: HMAC at boot on real kernels (2026-12-02)"),
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
        ("benchmarks.md", "How the dashboard holds up under load (`benchmarks/ui_load.py`)"),
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
    "**Export speed**": ("benchmarks.md", "Captures: export speed, JSON parser, memory"),
    "**What it costs** (`benchmarks/exporter.py`)": ("benchmarks.md", "`tpmtop exporter` (`benchmarks/exporter.py`)"),
    "**Tests.** (the lab)": ("testing.md", "The lab: `make test-lab`"),
    "**How the dashboard reads its data.**": ("dashboard.md", "How the dashboard reads its data"),
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
