"""Running ``tpmtop exporter`` processes in tests: start on a free port, scrape, stop."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.helpers.paths import REPO

KERNEL_TRACES = REPO / "tests" / "fixtures" / "kernel"
_TIME = re.compile(r"^(?P<head>.*?\s)(?P<secs>\d+)\.(?P<frac>\d{6}):(?P<tail>\s.*)$")


def shifted_copy(src: Path, shift_s: float, header: bool = True) -> str:
    """The trace's text with every event's time moved ``shift_s`` seconds later (a second copy
    of the same traffic, after the first, as a kernel would go on writing)."""
    out = []
    for line in src.read_text().splitlines():
        m = _TIME.match(line)
        if m is None or line.lstrip().startswith("#"):
            if header:
                out.append(line)
            continue
        t = int(m["secs"]) + int(m["frac"]) / 1e6 + shift_s
        out.append(f"{m['head']}{t:.6f}:{m['tail']}")
    return "\n".join(out) + "\n"


def span_s(src: Path) -> float:
    ts = [int(m["secs"]) + int(m["frac"]) / 1e6 for m in map(_TIME.match, src.read_text().splitlines())
          if m is not None and not m.string.lstrip().startswith("#")]
    return max(ts) - min(ts)


class Exporter:
    """``tpmtop exporter --listen 127.0.0.1:0 ARGS`` until :meth:`stop` (call it in a finalizer)."""

    def __init__(self, *args: str, timeout: float = 120):
        self.proc = subprocess.Popen([sys.executable, "-m", "tpmtop", "exporter", "--listen", "127.0.0.1:0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()  # its first line says where it listens (or why not)
        m = re.search(r"serving (https?://(\S+))/metrics", line)
        if m is None:
            _, rest = self.stop()
            raise AssertionError(f"the exporter did not start: {line!r} {rest!r}")
        self.url = m.group(1) + "/metrics"
        self.address = m.group(2)
        self.first_line = line

    def scrape(self, accept: str | None = None) -> tuple[str, str]:
        req = urllib.request.Request(self.url, headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.headers.get("Content-Type", ""), r.read().decode()

    def scrape_until(self, cond, what: str, timeout: float = 120) -> str:
        """Scrape every 0.2 s until ``cond(text)`` holds; its text. The exposition's tail in
        the failure when it never does."""
        deadline = time.monotonic() + timeout
        while True:
            _, text = self.scrape()
            if cond(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"the exporter never served {what}:\n{text[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of an exposition, parsed by prometheus_client's own text parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples(text).items() if n == name and want <= set(ls))
