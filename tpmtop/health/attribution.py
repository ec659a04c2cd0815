"""Who sent each wrong password: every TPM_RC_AUTH_FAIL / TPM_RC_BAD_AUTH response tied to the
client that caused it (and every command refused with TPM_RC_LOCKOUT while the TPM was locked
out: who kept trying, not who caused it), wherever tpmtop sees the traffic — its proxy and ``tpmtop run`` (the
client's process), the kernel view (the task that sent it) — from the same command/response
events a capture holds. The proxy feeds :class:`AuthFailureLog` as it forwards; ``tpmtop health
--capture FILE`` feeds it from a capture written by ``tpmtop run --json``, ``tpmtop proxy
--json`` or ``tpmtop kernel``.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from tpmtop.health.verdicts import Kind, Level, Verdict
from tpmtop.textsafe import safe
from tpmtop.tpm import names
from tpmtop.tpm.rcformat import RC_AUTH_FAIL, RC_LOCKOUT, decode, is_auth_failure

KEPT = 256  # the latest failures kept whole; the per-client counts cover every one


@dataclass(frozen=True)
class Who:
    name: str
    pid: int | None
    origin: str  # "proxy", "run", "kernel", or the capture's origin label

    @property
    def text(self) -> str:
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        return f"{safe(self.name)}{pid}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.pid, "origin": self.origin}


@dataclass(frozen=True)
class AuthFailure:
    who: Who
    command: str  # short name: Unseal, NV_Read …
    rc: int
    t_ns: int | None = None  # from the capture's origin, when known
    count: int = 1  # > 1 only when read from per-client error counts (no events kept)
    wall: str | None = None  # when it happened (UTC), where the capture says when its t_ns 0 was

    @property
    def counted(self) -> bool:
        """Whether the TPM counted it towards lockout (AUTH_FAIL; BAD_AUTH is a noDA entity)."""
        d = decode(self.rc)
        return d is not None and d.base == RC_AUTH_FAIL

    @property
    def refused(self) -> bool:
        """Refused with TPM_RC_LOCKOUT: the TPM was already locked out (not a wrong password)."""
        return self.rc == RC_LOCKOUT

    @property
    def line(self) -> str:
        d = decode(self.rc)
        pos = f" on {d.position}" if d is not None and d.position else ""
        times = f" ×{self.count}" if self.count > 1 else ""
        when = f"{self.wall} " if self.wall else ""
        what = ("TPM_RC_LOCKOUT (refused: locked out)" if self.refused else
                "TPM_RC_AUTH_FAIL (counted)" if self.counted else "TPM_RC_BAD_AUTH (noDA: not counted)")
        return f"{when}{self.who.text} via {self.who.origin}: {self.command} → 0x{self.rc:x}{pos} {what}{times}"

    def to_json(self) -> dict[str, Any]:
        d = decode(self.rc)
        return {"who": self.who.to_json(), "command": self.command, "rc": f"0x{self.rc:x}",
                "rc_text": names.rc_text(self.rc), "where": d.position if d and not self.refused else "",
                "counted": self.counted, "refused": self.refused, "t_ns": self.t_ns, "wall": self.wall,
                "count": self.count}


class AuthFailureLog:
    """The latest failures (at most :data:`KEPT`) and a count per client; thread-safe (the
    proxy's connection threads feed it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.latest: deque[AuthFailure] = deque(maxlen=KEPT)
        self.by_who: Counter[Who] = Counter()

    def observe(self, command: str, rc: int | None, who: Who, t_ns: int | None = None,
                count: int = 1, wall: str | None = None) -> AuthFailure | None:
        """Record one response; returns the failure when it was one (None otherwise): a wrong
        password, or a command refused with TPM_RC_LOCKOUT (kept, not counted as a culprit's)."""
        if rc != RC_LOCKOUT and not is_auth_failure(rc):
            return None
        assert rc is not None
        f = AuthFailure(who, command, rc, t_ns, count, wall)
        with self._lock:
            self.latest.append(f)
            if not f.refused:
                self.by_who[who] += count
        return f

    def failures(self) -> list[AuthFailure]:
        with self._lock:
            return list(self.latest)

    def culprits(self) -> str:
        """``tpm2_unseal ×3 (pids 12, 14, 17), …``: who, by program, most failures first."""
        with self._lock:
            items = list(self.by_who.items())
        by: dict[str, list[Any]] = {}  # name -> [failures, pids]
        for w, n in items:
            row = by.setdefault(safe(w.name), [0, []])
            row[0] += n
            if w.pid is not None:
                row[1].append(str(w.pid))
        ranked = sorted(by.items(), key=lambda kv: -kv[1][0])
        return ", ".join(f"{name} ×{n}" + (f" (pid{'s' if len(p) > 1 else ''} {', '.join(p)})" if p else "")
                         for name, (n, p) in ranked)

    def feed_capture(self, cap: dict[str, Any]) -> int:
        """Every auth failure in a capture (a dict as :mod:`tpmtop.capture` reads it); returns how
        many. Events when the capture kept them; else the per-client error counts of a proxy
        capture written without --events (who and how many, not when)."""
        clients = {c.get("id"): c for c in cap.get("clients") or [] if isinstance(c, dict)}
        # a kernel capture names the task on its operations (an event's op_seq), not its events
        tasks = {o.get("op_seq"): o for o in cap.get("ops") or [] if isinstance(o, dict) and "comm" in o}
        origin_default = "run" if isinstance(cap.get("command"), dict) else "proxy"
        t0 = _wall_origin(cap.get("t0_wall"))
        n = 0
        events = cap.get("events")
        if isinstance(events, list):
            for e in events:
                if not isinstance(e, dict) or (e.get("rc") != RC_LOCKOUT and not is_auth_failure(e.get("rc"))):
                    continue
                who = _who_of_event(e, clients, tasks, origin_default)
                cmd = str(e.get("command", "?")).removeprefix("TPM2_CC_")
                t_ns = e.get("t_ns")
                if self.observe(cmd, e["rc"], who, t_ns, wall=_wall(t0, t_ns)) is not None:
                    n += 1
            return n
        for c in clients.values():
            for row in c.get("errors_by_code") or []:
                rc = row.get("rc")
                if rc == RC_LOCKOUT or is_auth_failure(rc):
                    who = Who(str(c.get("name") or "?"), c.get("pid"), origin_default)
                    self.observe(str(row.get("command", "?")), rc, who, None, int(row.get("count") or 1))
                    n += int(row.get("count") or 1)
        return n


def _wall_origin(text: object) -> float | None:
    """A capture's ``t0_wall`` as seconds since the epoch (None: absent or not a time)."""
    import datetime as dt

    if not isinstance(text, str):
        return None
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return t.timestamp() if t.tzinfo is not None else None


def _wall(t0: float | None, t_ns: object) -> str | None:
    import datetime as dt

    if t0 is None or not isinstance(t_ns, int) or isinstance(t_ns, bool):
        return None
    return dt.datetime.fromtimestamp(t0 + t_ns / 1e9, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _who_of_event(e: dict[str, Any], clients: dict[Any, dict[str, Any]], tasks: dict[Any, dict[str, Any]],
                  origin_default: str) -> Who:
    c = clients.get(e.get("client"))
    if c is not None:
        return Who(str(c.get("name") or "?"), c.get("pid"), origin_default)
    if e.get("origin") == "kernel":
        t = tasks.get(e.get("op_seq"))
        if t is not None:
            return Who(str(t.get("comm") or "?"), t.get("pid"), "kernel")
        return Who("a task the kernel trace did not name", None, "kernel")
    return Who(f"unknown sender ({e.get('origin', '?')})", None, str(e.get("origin") or "?"))


def verdict(log: AuthFailureLog, sources: list[str]) -> Verdict:
    """Who caused the failures tpmtop saw (``sources``: where it looked)."""
    fails = log.failures()
    seen = f"in {', '.join(sources)}" if sources else "while tpmtop watched"
    if not fails:
        return Verdict(Kind.AUTH_FAILURES, Level.OK if sources else Level.INFO,
                       f"no wrong password {seen}" if sources else
                       "no traffic watched: give --capture FILE (a tpmtop run/proxy/kernel capture) "
                       "to name who caused failures")
    counted = sum(f.count for f in fails if f.counted)
    refused = sum(f.count for f in fails if f.refused)
    total = sum(f.count for f in fails) - refused
    # The failures explain the lockout counter; the counter is the problem (and it decays):
    # history alone does not make `tpmtop health` fail once the TPM has forgiven it.
    text = f"{total} wrong password(s) {seen}, {counted} counted towards lockout"
    text += f": {log.culprits()}" if total else ""
    if refused:
        who = sorted({f.who.text for f in fails if f.refused})
        text += f"; {refused} command(s) refused with TPM_RC_LOCKOUT while locked out ({', '.join(who)})"
    return Verdict(Kind.AUTH_FAILURES, Level.INFO, text, tuple(f.line for f in fails),
                   (("failures", [f.to_json() for f in fails]),))
