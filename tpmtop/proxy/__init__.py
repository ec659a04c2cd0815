"""``tpmtop proxy``: serve the selected TPM to other programs and record who sent what.

Layer: next to capture/bench (it uses tpm/ and recorder, stats; nothing above it).

- :mod:`.protocol` — the two wire protocols tpm2-tss's simulator TCTIs speak (swtpm's socket
  protocol and the Microsoft simulator's), server side; control/platform requests are
  answered here and never reach the TPM.
- :mod:`.peers` — who is on the other end of a connection (pid, name, cmdline, uid).
- :mod:`.access` — who may use the TPM through the proxy (closed by default: this uid, root).
- :mod:`.accounting` — per-client commands, errors, latencies, handles created/flushed, leaks;
  departed clients folded per program (bounded memory).
- :mod:`.latency` — a per-client latency distribution sized to what it holds.
- :mod:`.turns` — one client at a time over a raw TPM, as swtpm serves.
- :mod:`.forward` — the ONE function through which a client's command reaches tpmtop's
  instrumented transport, labelled with the client.
- :mod:`.server` — listeners, connection threads (bounded), serving model, departures, recovery.
- :mod:`.report` — capture additions and the ``tpmtop run`` table.
"""

# The front door: the modules the rest of tpmtop uses (tests/unit/test_front_doors.py keeps it
# so); the others are the server's own parts. Listed, not imported.
__all__ = [
    "access",  # who may use the TPM through the proxy
    "accounting",  # per-client accounts
    "holders",  # who holds a TPM device open
    "latency",  # a per-client latency distribution
    "lines",  # the proxy's log lines and their kinds
    "peers",  # who is at the other end of a socket (its owner's uid; the exporter caps per user by it)
    "report",  # capture additions and the `tpmtop run` table
    "server",  # the server
]
