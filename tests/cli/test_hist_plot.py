"""Issue 24 item 12: `bench --hist` and `compare --hist` print bpftrace's hist() text; `--plot`
draws the mode comparison (matplotlib, imported only then). Real swtpm runs (``--sim``)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO
from tests.helpers.processes import run_tpmtop

ROW = re.compile(r"^(\[\d+[KMGTPE]?(, \d+[KMGTPE]?\))?\]?) *(\d+) \|(@*) *\|$")
POW = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def _value(label: str) -> int:
    m = re.fullmatch(r"(\d+)([KMGTPE]?)", label)
    assert m, label
    return int(m.group(1)) * POW[m.group(2)]


def maps(text: str) -> dict[str, list[tuple[int, int, int]]]:
    """bpftrace hist() maps in ``text``: title -> [(low, high, count)], every row checked
    against the layout (label in 16 columns, count in 8, a 52-wide bar between pipes)."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    title = None
    for line in text.splitlines():
        if line.startswith("@") and line.endswith(":"):
            title = line[:-1]
            out[title] = []
        elif title is not None and line.startswith("["):
            assert len(line) == 16 + 8 + 2 + 52 + 1, line
            m = ROW.match(line)
            assert m, line
            label, count, bar = line[:16].strip(), int(m.group(3)), m.group(4)
            if "," in label:
                lo, hi = (_value(x.strip()) for x in label[1:-1].split(","))
            else:
                lo = hi = int(label[1:-1])
            out[title].append((lo, hi, count))
            most = max(c for _, _, c in out[title]) if out[title] else count
            assert len(bar) <= 52 and (count == 0) <= (bar == ""), line
            assert most > 0
        elif not line.strip():
            title = None
    return out


def test_hist_text_is_bpftraces_layout():
    from tpmtop.stats import hist_text, pow2_index

    slots: dict[int, int] = {}
    for us in (0, 1, 2, 3, 700, 1500, 1600, 1700):
        slots[pow2_index(us)] = slots.get(pow2_index(us), 0) + 1
    assert hist_text(slots, "@us") == "\n".join([
        "@us:",
        "[0]                    1 |@@@@@@@@@@@@@@@@@                                   |",
        "[1]                    1 |@@@@@@@@@@@@@@@@@                                   |",
        "[2, 4)                 2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |",
        "[4, 8)                 0 |                                                    |",
        "[8, 16)                0 |                                                    |",
        "[16, 32)               0 |                                                    |",
        "[32, 64)               0 |                                                    |",
        "[64, 128)              0 |                                                    |",
        "[128, 256)             0 |                                                    |",
        "[256, 512)             0 |                                                    |",
        "[512, 1K)              1 |@@@@@@@@@@@@@@@@@                                   |",
        "[1K, 2K)               3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|",
    ]) + "\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("hist")
    r = run_tpmtop("bench", "--sim", "-n", "60", "--warmup", "2", "--modes", "none,per-command", "--engine", "native",
                   "--events", "--json", str(d / "a.json"), "--hist", "--plot", str(d / "a.svg"), "-q")
    assert r.returncode == 0, r.stderr
    plain = run_tpmtop("bench", "--sim", "-n", "30", "--warmup", "0", "--modes", "none,per-command",
                       "--engine", "native", "--json", str(d / "b.json"), "-q")
    assert plain.returncode == 0, plain.stderr
    return d, r


def test_bench_hist_has_every_mode_every_operation_and_no_gap(runs):
    _d, r = runs
    got = maps(r.stdout)
    assert set(got) == {"@extend_us[native, none]", "@extend_us[native, per-command]"}
    for title, rows in got.items():
        assert sum(c for _, _, c in rows) == 60, title  # every counted operation, in one bucket each
        for (_, hi, _), (lo, _, _) in itertools.pairwise(rows):
            assert lo == hi  # contiguous: the empty buckets are printed, not dropped
        assert rows[0][2] and rows[-1][2]  # from the lowest filled bucket to the highest
    # the per-command mode costs more than none: its median bucket is not below none's
    def median_lo(rows):
        half, acc = sum(c for *_, c in rows) / 2, 0
        for lo, _, c in rows:
            acc += c
            if acc >= half:
                return lo
        raise AssertionError("no median bucket")
    assert median_lo(got["@extend_us[native, per-command]"]) >= median_lo(got["@extend_us[native, none]"])


def test_compare_hist_from_the_operations_of_each_capture(runs):
    d, _ = runs
    r = run_tpmtop("compare", str(d / "a.json"), str(d / "a.json"), "--hist")
    assert r.returncode == 0, r.stderr
    got = maps(r.stdout)
    runs_a = {(x["engine"], x["mode"]): x["op_us"]["count"] for x in json.loads((d / "a.json").read_text())["runs"]}
    for letter in "AB":
        for (engine, mode), n in runs_a.items():
            rows = got[f"@extend_us[{letter}, {engine}, {mode}]"]
            assert sum(c for *_, c in rows) == n


def test_compare_hist_says_when_a_capture_has_no_operations(runs):
    d, _ = runs
    r = run_tpmtop("compare", str(d / "a.json"), str(d / "b.json"), "--hist")
    assert r.returncode == 0, r.stderr
    assert f"B: {d / 'b.json'} holds no per-operation times (record with --events): no histogram" in r.stdout
    assert "@extend_us[A, native, none]:" in r.stdout and "[B," not in r.stdout


def test_bench_plot_is_an_svg_naming_every_mode(runs):
    d, r = runs
    svg = (d / "a.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "plot written to" in r.stderr


@pytest.mark.parametrize("ext, magic", [("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<?xml")])
def test_compare_plot_in_the_format_of_its_extension(runs, ext, magic):
    d, _ = runs
    out = d / f"cmp.{ext}"
    r = run_tpmtop("compare", str(d / "a.json"), str(d / "b.json"), "--plot", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes().startswith(magic)


def test_plot_of_an_unknown_format_is_refused_before_the_run(tmp_path):
    r = run_tpmtop("bench", "--sim", "--plot", str(tmp_path / "x.gif"))
    assert r.returncode == 2
    assert r.stderr.strip() == f"tpmtop: --plot {tmp_path / 'x.gif'}: name a .svg, .png or .pdf file " \
                               "(the format follows the extension)"


def test_plot_without_matplotlib_says_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None; from tpmtop.cli import main; "
            f"sys.exit(main(['bench', '--sim', '--plot', {str(tmp_path / 'x.svg')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip() == ("tpmtop: --plot needs matplotlib, which is not installed: "
                                "pip install 'tpmtop[plot]' (or: pip install matplotlib)")
    assert not (tmp_path / "x.svg").exists()


def test_start_up_does_not_import_matplotlib():
    code = ("import sys; from tpmtop.cli import build_parser; build_parser(eager=True); "
            "import tpmtop.cli.bench, tpmtop.cli.compare, tpmtop.cli.plot; print('matplotlib' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr
