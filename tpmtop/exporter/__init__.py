"""``tpmtop exporter``: the metrics a fleet's Prometheus scrapes from a running daemon.

Not to be confused with :mod:`tpmtop.export`, which writes a capture to a file (Chrome
trace, pcapng, an OpenMetrics textfile). This package serves live metrics over HTTP with
prometheus_client: the kernel's own TPM traffic (:mod:`tpmtop.exporter.kernel_feed`), the
system facts ``tpmtop boot`` reads (:mod:`tpmtop.exporter.facts_feed`) and, with ``--probe``,
read-only TPM properties (:mod:`tpmtop.exporter.tpm_probe`). Layer: exporter, below the CLI; no Textual.
"""
