"""``tpmtop exporter``: the metrics a fleet's Prometheus scrapes from a running daemon.

Not to be confused with :mod:`tpmtop.exporters`, which writes a capture to a file (Chrome
trace, pcapng, an OpenMetrics textfile). This package serves live metrics over HTTP with
prometheus_client: the kernel's own TPM traffic (:mod:`tpmtop.fleet.kernel_feed`), the
system facts ``tpmtop boot`` reads (:mod:`tpmtop.fleet.facts_feed`) and, with ``--probe``,
read-only TPM properties (:mod:`tpmtop.fleet.tpm_probe`). Layer: fleet, below the CLI; no Textual.
"""
