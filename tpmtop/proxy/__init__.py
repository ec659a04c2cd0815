"""``tpmtop proxy``: serve the selected TPM to other programs and record who sent what.

Layer: next to capture/bench (it uses tpm/ and recorder, stats; nothing above it).

- :mod:`.protocol` — the two wire protocols tpm2-tss's simulator TCTIs speak (swtpm's socket
  protocol and the Microsoft simulator's), server side; control/platform requests are
  answered here and never reach the TPM.
- :mod:`.peers` — who is on the other end of a connection (pid, name, cmdline, uid).
- :mod:`.accounting` — per-client commands, errors, latencies, handles created/flushed, leaks.
- :mod:`.forward` — the ONE function through which a client's command reaches tpmtop's
  instrumented transport, labelled with the client.
- :mod:`.server` — listeners and per-connection threads.
- :mod:`.report` — capture additions and the ``tpmtop run`` table.
"""
