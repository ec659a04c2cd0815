"""What the tests share, one module per subject (imported as tests.helpers.<module>):

paths        where the data folders are (fixtures/, captures/, bad_captures/, ...)
processes    tpmtop as a user runs it (run_tpmtop, TPMTOP), TcpSwtpm, free_port_pair, BenchProcess
captures     capture documents built in tests, capture_of(trace) (kernel --from-trace), and
             BenchCaptures: the bench captures made once a session (fixture bench_captures)
exports      checks of exported Chrome traces and OpenMetrics text against their capture
mutations    the fuzz tests' edits (EDITS, _mutate, _mutate_json)
tui          the dashboard tests' helpers (SIZE, app_for, until, main_screen, header_text)
proxy        a `tpmtop proxy` process (Proxy) and what to ask around it
exporter     a `tpmtop exporter` process (Exporter), its scrapes, shifted copies of a trace
kernel_live  whether live kernel tracing can run here; a running `tpmtop kernel` (Tracer)
decode_corpus, decode_peers  real traffic for the decode corpus, and the peers it is held to

Fixtures are not here: tests/conftest.py has those every room uses, each room's conftest.py
its own.
"""
