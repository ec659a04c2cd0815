"""The exporter room: `tpmtop exporter` serving real kernel traces, scraped by a real Prometheus.
The running-exporter helper is in tests/helpers/exporter.py; no shared fixtures."""
