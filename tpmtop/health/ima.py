"""IMA's measurement list: how fast it grows (now and over the boot), the policy in force where
it can be read, and the files measured most. Reads securityfs only (root).

The list (``ascii_runtime_measurements``) names files, not processes: the tasks IMA extended
for, and their share of TPM time, come from a kernel capture (``tpmtop kernel --json K``, then
``tpmtop health --capture K``: :mod:`.kernel_traffic`)."""

from __future__ import annotations

import time
from collections import Counter

from tpmtop.boot.cmdline import shown
from tpmtop.boot.facts import IMA_DIR, SystemFacts
from tpmtop.boot.rootfs import RootReader, Unavailable
from tpmtop.health.kernel_traffic import KernelTraffic
from tpmtop.health.verdicts import Kind, Level, Verdict, unknown
from tpmtop.textsafe import safe

LIST_READ_MAX = 8 << 20  # bytes of the list read for the top files (a long list is sampled from its start)
TOP = 5


def _count(r: RootReader) -> int:
    return int(r.read_line(f"{IMA_DIR}/runtime_measurements_count"))


def verdict(r: RootReader, sf: SystemFacts, sample_s: float = 1.0, top_files: bool = True,
            traffic: KernelTraffic | None = None) -> Verdict:
    """``sample_s``: seconds to watch the count (0: the boot's rate only); ``top_files``: read the
    list itself (up to :data:`LIST_READ_MAX`) for the files measured most; ``traffic``: the
    kernel's commands of ``--capture`` files (the tasks IMA extended for, and their TPM time)."""
    f = sf.get("ima.measurements")
    if f is None or not f.ok:
        why = f.reason if f is not None else "IMA not read"
        return unknown(Kind.IMA, f"needs root: {why}" if "permission" in (why or "") else why or "IMA unreadable")
    n0 = int(f.value)
    ev = [f"{IMA_DIR}/runtime_measurements_count: {n0}"]
    data: list[tuple[str, object]] = [("measurements", n0)]
    rate_boot = None
    try:
        up = float(r.read_line("/proc/uptime").split()[0])
        rate_boot = n0 / up if up > 0 else None
        ev.append(f"/proc/uptime: {up:.0f} s")
    except (Unavailable, ValueError, IndexError):
        pass
    now = None
    if r.live and sample_s > 0:
        t0 = time.monotonic()
        time.sleep(sample_s)
        try:
            now = (_count(r) - n0) / (time.monotonic() - t0)
        except (Unavailable, ValueError):
            now = None
    data += [("per_s_boot", rate_boot), ("per_s_now", now)]
    try:
        policy = r.read_text(f"{IMA_DIR}/policy")
        rules = [ln for ln in policy.splitlines() if ln.strip()]
        ev.append(f"{IMA_DIR}/policy: {len(rules)} rules; first: {safe(rules[0]) if rules else '-'}")
        data.append(("policy_rules", len(rules)))
    except Unavailable as e:
        hints = sf.value("ima.policy_hints") or {}
        words = (" ".join(k if v is None else f"{k}={v}" for k, v in hints.items()) if isinstance(hints, dict)
                 else str(hints))
        ev.append(f"policy: {e}" + (f"; command line: {safe(shown(words))}" if hints else ""))
    try:
        if not top_files:
            raise Unavailable("not read here (tpmtop health reads it)")
        # one byte past the sample says whether the list went on (a busy server's is longer than any bound)
        raw = r.read_start(f"{IMA_DIR}/ascii_runtime_measurements", LIST_READ_MAX + 1)
        cut = len(raw) > LIST_READ_MAX
        raw = raw[:LIST_READ_MAX]
        paths: Counter[str] = Counter()
        for line in raw.decode("utf-8", "replace").splitlines():
            parts = line.split(" ")  # PCR template-hash template algo:digest path [signature]
            if len(parts) >= 5:
                paths[parts[4]] += 1
        entries = sum(paths.values())
        where = f"the first {entries} entries" if cut else f"the {entries} entries"
        top = [(p, k) for p, k in paths.most_common(TOP) if k > 1]
        ev += [f"measured {k}×: {safe(p)}" for p, k in top] or [
            f"no file measured more than once in {where} of the list"]
        if not cut and entries > n0:
            # the count is read first, the list after: IMA's list grows in between (and a saved
            # tree's two files may have been copied at different times); the list is the later
            ev[0] += f" (read first; the list, read after it, holds {entries}: IMA measured meanwhile)"
            n0 = entries
            data[0] = ("measurements", n0)
        data.append(("top_files", [{"path": p, "count": k} for p, k in top]))
    except Unavailable as e:
        ev.append(f"list: {e}")
    if traffic is not None and traffic.commands:
        ev += traffic.ima_lines()
        data.append(("top_tasks", traffic.ima_data()))
    bypass = [p for p in (sf.kernel_log.problems if sf.kernel_log else []) if p.kind == "ima-bypass"]
    ev += [f"dmesg:{p.line}: {safe(p.text)}" for p in bypass]
    rates = []
    if now is not None:
        rates.append(f"{now:.1f}/s now")
    if rate_boot is not None:
        rates.append(f"{rate_boot:.2f}/s over the boot")
    if bypass:
        return Verdict(Kind.IMA, Level.WARN, f"{n0} measurements, extended into no PCR: IMA found no TPM "
                       "(TPM-bypass), so no attestation can cover them", tuple(ev), tuple(data))
    return Verdict(Kind.IMA, Level.INFO, f"{n0} measurements" + (f" ({', '.join(rates)})" if rates else ""),
                   tuple(ev), tuple(data))
