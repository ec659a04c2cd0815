"""Where the tests' data lives. The data folders stay at the top of tests/ (the README's and
the docs' commands, the benchmarks and scripts/screenshots.py name them there); every room
finds them through these names rather than through its own location."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"  # boot/ (system trees), kernel/ (kernel traces), traces/ (ftrace/bpftrace)
BOOT_TREES = FIXTURES / "boot"
KERNEL_TRACES = FIXTURES / "kernel"
TRACES = FIXTURES / "traces"
CAPTURES = TESTS / "captures"
SAMPLE_CAPTURE = CAPTURES / "sample-1.0.json"  # a hand-checked capture of every schema 1.0 member
BAD_CAPTURES = TESTS / "bad_captures"
PROFILE_FIXTURES = TESTS / "profile_fixtures"
TUI_FIXTURES = TESTS / "tui_fixtures"
SLB_CAPTURE = TUI_FIXTURES / "slb9670-extend.json"  # a committed bench capture under the slb9670 profile
