"""A capture's histograms as OpenMetrics text, for node_exporter's textfile collector.

Each server writes its file (``tpmtop export … --format openmetrics -o
/var/lib/node_exporter/textfile/tpmtop.prom``, atomically), node_exporter serves it, Prometheus
collects it: nobody needs a tpmtop server.

Families (seconds, as Prometheus convention wants):
- ``tpmtop_operation_seconds{engine,mode,op}``: one whole operation (e.g. one PCR extend with
  its session set-up); ``tpmtop_operation_wire_seconds`` / ``tpmtop_operation_host_seconds``
  split it into time on the wire (TPM) and host work (HMAC, parameter encryption …).
- ``tpmtop_command_seconds{command,engine,mode,op}``: each TPM command code's wire time.
  Summing by ``command`` in PromQL gives one histogram per command code across runs.
- ``tpmtop_commands_per_operation{command,engine,mode,op}``: a gauge.
- ``tpmtop_capture_created_seconds``: when the capture was taken (for staleness alerts).
Every series carries ``manufacturer`` and ``firmware`` (TPM2_PT_MANUFACTURER and firmware
version), so a fleet query can group by TPM model.

Buckets are the capture's own log buckets (10**(k/4) µs), made cumulative; a summary without a
histogram still gives ``_count``/``_sum`` and the ``+Inf`` bucket.

The text is generated here rather than with prometheus_client's exposition code:
prometheus_client is not a runtime dependency of tpmtop (it is only in the test extra), and a
collector plus registry would be more code than these few lines. It also keeps the tests
honest: they parse this output with prometheus_client's independent parsers (the OpenMetrics
one and the classic text-format one node_exporter's format follows). The output stays within
what both formats accept (histograms with ``_bucket``/``_sum``/``_count``, no ``_created``,
``# EOF`` last — a comment to the classic parser).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpmtop.output import Output

_FAMILIES = (
    ("op_us", "tpmtop_operation_seconds", "Duration of one operation (wire + host), from tpmtop bench."),
    ("wire_us", "tpmtop_operation_wire_seconds", "Time one operation spent in TPM commands on the wire."),
    ("host_us", "tpmtop_operation_host_seconds", "Host-side work in one operation (sessions, HMAC, encryption)."),
)


def _esc(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(d: dict[str, Any]) -> str:
    return ",".join(f'{k}="{_esc(v)}"' for k, v in d.items())


def _num(x: float) -> str:
    if x == math.inf:
        return "+Inf"
    # 12 significant digits: drops float noise such as 0.0005623410000000001 in bucket bounds.
    return f"{float(x):.12g}"


def _histogram(lines: list[str], name: str, labels: dict[str, Any], s: dict[str, Any]) -> None:
    base = _labels(labels)
    hist = s.get("histogram")
    if hist:
        # The count comes from the buckets so that +Inf == _count holds exactly.
        cum = 0
        for ub_us, c in sorted(hist):
            cum += c
            lines.append(f'{name}_bucket{{{base},le="{_num(ub_us / 1e6)}"}} {cum}')
        count = cum
    else:
        count = s["count"]
    lines.append(f'{name}_bucket{{{base},le="+Inf"}} {count}')
    lines.append(f"{name}_count{{{base}}} {count}")
    lines.append(f"{name}_sum{{{base}}} {_num(s['mean'] * count / 1e6)}")


def _run_labels(r: dict[str, Any]) -> dict[str, Any]:
    lab = {"engine": r["engine"], "mode": r["mode"], "op": r["op"]}
    if "period" in r:  # runs on both sides of a TPM reset are separate series
        lab["period"] = str(r["period"])
    return lab


def render(capture: dict[str, Any]) -> str:
    """The OpenMetrics text of a validated capture (ends with ``# EOF``)."""
    from tpmtop.errors import UsageError

    tpm = capture["tpm"]
    common = {"manufacturer": tpm["manufacturer"], "firmware": tpm["firmware"]}
    runs = capture["runs"]
    seen = set()
    for i, r in enumerate(runs):
        key = (r["engine"], r["mode"], r["op"], r.get("period"))
        if key in seen:
            # Two series with one label set would be rejected by Prometheus; say which.
            raise UsageError(f"runs[{i}]: a second run for engine={key[0]} mode={key[1]} op={key[2]}; "
                             f"OpenMetrics needs one series per label set")
        seen.add(key)
    out: list[str] = []
    for field, name, help_ in _FAMILIES:
        out.append(f"# TYPE {name} histogram")
        out.append(f"# UNIT {name} seconds")
        out.append(f"# HELP {name} {help_}")
        for r in runs:
            _histogram(out, name, _run_labels(r) | common, r[field])
    out.append("# TYPE tpmtop_command_seconds histogram")
    out.append("# UNIT tpmtop_command_seconds seconds")
    out.append("# HELP tpmtop_command_seconds Wire time of one TPM command, per command code.")
    for r in runs:
        for cc, s in sorted(r["commands"].items()):
            _histogram(out, "tpmtop_command_seconds", {"command": cc} | _run_labels(r) | common, s)
    out.append("# TYPE tpmtop_commands_per_operation gauge")
    out.append("# HELP tpmtop_commands_per_operation TPM commands of each code sent per operation.")
    for r in runs:
        for cc, v in sorted(r["commands_per_op"].items()):
            lab = _labels({"command": cc} | _run_labels(r) | common)
            out.append(f"tpmtop_commands_per_operation{{{lab}}} {_num(v)}")
    created = _timestamp(capture.get("created"))
    if created is not None:
        out.append("# TYPE tpmtop_capture_created_seconds gauge")
        out.append("# UNIT tpmtop_capture_created_seconds seconds")
        out.append("# HELP tpmtop_capture_created_seconds When the capture was taken (Unix time).")
        out.append(f"tpmtop_capture_created_seconds{{{_labels(common)}}} {_num(created)}")
    out.append("# EOF")
    return "\n".join(out) + "\n"


def _timestamp(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        return None  # a local time without offset would mislead a fleet-wide query
    return dt.timestamp()


def export_openmetrics(capture_path: str, out_path: str | Output) -> dict[str, Any]:
    """``out_path``: a path or a checked :class:`tpmtop.output.Output` (a regular file is
    replaced atomically, a device or pipe written through, ``-`` is stdout)."""
    from tpmtop.capture import load_summary
    from tpmtop.output import Output

    dest = out_path if isinstance(out_path, Output) else Output(out_path, inputs=[capture_path])
    dest.check()
    doc = load_summary(capture_path)
    text = render(doc)
    dest.write(text)
    return {"runs": len(doc["runs"]), "bytes": len(text.encode())}
