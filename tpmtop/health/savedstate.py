"""Health's own state file: the clock each TPM last showed, so the next run can say "reset /
restarted / cleared since". JSON, one entry per TPM, keyed by what the TPM says it is (its EK
certificate's SHA-256 where it has one, else manufacturer, vendor, firmware and the TCTI).

Default ``$XDG_STATE_HOME/tpmtop/health-state.json`` (else ``~/.local/state/...``), made 0700:
it names this machine's TPM. A `tpmtop pcrs --save` snapshot is read too when it carries
``tpm.clock``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tpmtop.boundedread import read_bounded
from tpmtop.errors import UsageError
from tpmtop.health.tpmstate import Saved, clock_from_json, clock_json
from tpmtop.tpm.status import ClockInfo

SCHEMA = "tpmtop.health-state/1"
LIMIT = 1024 * 1024  # a few hundred bytes per TPM


def default_path(env: dict[str, str] | None = None) -> Path:
    e = os.environ if env is None else env
    base = e.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tpmtop" / "health-state.json"


def tpm_key(tpm: dict[str, Any], ek_sha256: str | None) -> str:
    if ek_sha256:
        return f"ek:{ek_sha256}"
    return "|".join(str(tpm.get(k, "?")) for k in ("manufacturer", "vendor", "firmware", "tcti"))


def _load(path: Path) -> dict[str, Any]:
    try:
        raw = read_bounded(path, LIMIT, what="health state file")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise UsageError(f"{path}: cannot read the health state file: {e.strerror}") from None
    try:
        doc = json.loads(raw)
    except ValueError:
        raise UsageError(f"{path}: not a health state file (not JSON)") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("tpms"), dict):
        raise UsageError(f"{path}: not a health state file (schema {SCHEMA})")
    return doc


def saved(path: Path, key: str) -> Saved | None:
    entry = _load(path).get("tpms", {}).get(key)
    if not isinstance(entry, dict):
        return None
    c = clock_from_json(entry.get("clock"))
    if c is None:
        return None
    return Saved(c, str(entry.get("saved_at", "?")), str(path))


def from_snapshot(path: str) -> Saved | None:
    """A `tpmtop pcrs --save` snapshot's clock (``tpm.clock``), if it carries one."""
    from tpmtop.pcrs import snapshot

    doc = snapshot.load(path)
    tpm = doc.get("tpm") if isinstance(doc.get("tpm"), dict) else None
    c = clock_from_json(tpm.get("clock")) if tpm else None
    return Saved(c, str(doc.get("saved_at", "?")), path) if c is not None else None


def save(path: Path, key: str, tpm: dict[str, Any], clock: ClockInfo) -> None:
    from tpmtop.atomic import write_atomic

    try:
        doc = _load(path)
    except UsageError:
        doc = {}  # a broken file is replaced by a good one (it was health's own)
    got = doc.get("tpms")
    tpms: dict[str, Any] = got if isinstance(got, dict) else {}
    tpms[key] = {"tcti": tpm.get("tcti"), "manufacturer": tpm.get("manufacturer"), "clock": clock_json(clock),
                 "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"schema": SCHEMA, "tpms": tpms}, indent=1) + "\n")
