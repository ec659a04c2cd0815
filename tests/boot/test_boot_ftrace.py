"""ftrace function_graph import. Expected numbers are read off the trace text by hand
(µs in the trace × 1000 = ns), never produced by the parser under test."""


import pytest

from tests.helpers.paths import TESTS
from tpmtop.boot.ftrace import parse_function_graph
from tpmtop.boot.traces import load_trace
from tpmtop.errors import UsageError

TRACES = TESTS / "fixtures" / "traces"


def parse(text: str):
    return parse_function_graph(text.splitlines(), "t.txt")


def samples(series_map):
    return {k: v.samples_ns for k, v in series_map.items()}


def test_published_hmac_extend():
    r = load_trace(str(TRACES / "ftrace-graph-extend-hmac-slb9670.txt"))
    assert r.format == "ftrace function_graph"
    assert r.hmac_seen
    assert samples(r.functions) == {
        "tpm_transmit_cmd": [36_976_990, 84_746_510, 3_195_083, 24_356_460],
        "tpm2_start_auth_session": [126_795_100],
        "tpm_buf_append_hmac_session": [2_254],
        "tpm_buf_fill_hmac_session": [3_546],
        "tpm_buf_check_hmac_response": [3_496],
        "tpm2_pcr_extend": [151_171_000],
    }
    # The three commands inside tpm2_start_auth_session, in the order the kernel sends them.
    assert samples(r.operations) == {
        "ContextLoad": [36_976_990],
        "StartAuthSession": [84_746_510],
        "FlushContext": [3_195_083],
        "PCR_Extend (HMAC session)": [24_356_460],
    }


def test_published_nohmac_extend():
    r = load_trace(str(TRACES / "ftrace-graph-extend-nohmac-slb9670.txt"))
    assert not r.hmac_seen
    assert samples(r.functions) == {"tpm_buf_append_hmac_session": [1_112], "tpm_transmit_cmd": [6_360_029],
                                    "tpm2_pcr_extend": [6_415_012]}
    assert samples(r.operations) == {"PCR_Extend": [6_360_029]}
    assert r.notes == []


TIME_TASK = """\
# tracer: function_graph
#
#     TIME        CPU  TASK/PID         DURATION                  FUNCTION CALLS
#      |          |     |    |           |   |                     |   |   |   |
 2364.071380 |   1)    cat-1234    |               |  tpm2_pcr_extend() {
 2364.071381 |   1)    cat-1234    |               |    tpm2_start_auth_session() {
 2364.071382 |   1)    cat-1234    |               |      tpm2_load_context() {
 2364.108000 |   1)    cat-1234    | * 36500.50 us |        tpm_transmit_cmd();
 2364.108100 |   1)    cat-1234    | * 36600.00 us |      }
 2364.193000 |   1)    cat-1234    | * 84000.25 us |      tpm_transmit_cmd();
 2364.193010 |   1)    cat-1234    |               |      tpm2_flush_context() {
 2364.196000 |   1)    cat-1234    | # 3001.000 us |        tpm_transmit_cmd();
 2364.196010 |   1)    cat-1234    | # 3010.500 us |      } /* tpm2_flush_context */
 2364.196020 |   1)    cat-1234    | @ 123900.7 us |    } /* tpm2_start_auth_session */
 2364.196030 |   1)    cat-1234    |   3.100 us    |    tpm_buf_fill_hmac_session();
 2364.220000 |   1)    cat-1234    | * 24000.00 us |    tpm_transmit_cmd();
 2364.220010 |   1)    cat-1234    | @ 148000.0 us |  }
"""


def test_time_and_task_columns_nested_helpers():
    r = parse(TIME_TASK)
    assert samples(r.operations) == {
        "ContextLoad": [36_500_500],
        "StartAuthSession": [84_000_250],  # the one command sent directly: no positional guess
        "FlushContext": [3_001_000],
        "PCR_Extend (HMAC session)": [24_000_000],
    }
    assert r.functions["tpm2_load_context"].samples_ns == [36_600_000]
    assert r.functions["tpm2_flush_context"].samples_ns == [3_010_500]
    assert r.functions["tpm2_start_auth_session"].samples_ns == [123_900_700]
    assert r.functions["tpm2_pcr_extend"].samples_ns == [148_000_000]
    assert r.functions["tpm_transmit_cmd"].samples_ns == [36_500_500, 84_000_250, 3_001_000, 24_000_000]
    assert not any("split" in n for n in r.notes)


NO_CPU_COLUMN = """\
# tracer: function_graph
#
# DURATION                  FUNCTION CALLS
# |   |                     |   |   |   |
               |  tpm2_pcr_extend() {
  1.500 us    |    tpm_buf_append_hmac_session();
# 5000.125 us |    tpm_transmit_cmd(); /* ret=0x0 */
$ 1000001 us |  } /* tpm2_pcr_extend ret=0 */
"""


def test_rows_without_cpu_column_start_with_the_mark():
    r = parse(NO_CPU_COLUMN)
    assert r.functions["tpm_transmit_cmd"].samples_ns == [5_000_125]
    assert r.functions["tpm2_pcr_extend"].samples_ns == [1_000_001_000]
    assert samples(r.operations) == {"PCR_Extend": [5_000_125]}


MARKS_AND_NOISE = """\
# tracer: function_graph
#
# CPU  DURATION                  FUNCTION CALLS
# |     |   |                     |   |   |   |
 0)   0.900 us    |  a();
 0) + 10.001 us   |  b();
 0) ! 100.010 us  |  c();
 0) # 1000.100 us |  d();
 0) * 10000.01 us |  e();
 0) @ 100000.1 us |  f();
 0) $ 1000001 us  |  g();
 ------------------------------------------
 0)   <idle>-0    =>   cat-1234
 ------------------------------------------
 0)   ==========> |
 0)               |  smp_apic_timer_interrupt() {
 0)   4.000 us    |    irq_enter();
 0)   9.500 us    |  }
 0)   <========== |
 0)               |  /* tpm_tis: status 0x90 */
CPU:0 [LOST 12 EVENTS]
##### CPU 3 buffer started ####
 3) ! 200.000 us  |  } /* tpm_tis_send */
"""


def test_every_mark_context_switches_irq_arrows_and_lost_entries():
    r = parse(MARKS_AND_NOISE)
    assert samples(r.functions) == {
        "a": [900], "b": [10_001], "c": [100_010], "d": [1_000_100], "e": [10_000_010],
        "f": [100_000_100], "g": [1_000_001_000], "irq_enter": [4_000],
        "smp_apic_timer_interrupt": [9_500], "tpm_tis_send": [200_000],
    }
    assert r.operations == {}
    assert "1 exit(s) whose entry was not in the trace" in r.notes
    assert not any("disagree" in n for n in r.notes)


def test_cpus_interleave_with_their_own_stacks():
    text = """\
 0)               |  tpm2_pcr_extend() {
 1)               |  tpm2_get_random() {
 0) # 2000.000 us |    tpm_transmit_cmd();
 1) ! 500.000 us  |    tpm_transmit_cmd();
 1) ! 510.000 us  |  }
 0) # 2010.000 us |  }
"""
    r = parse(text)
    assert samples(r.operations) == {"PCR_Extend": [2_000_000], "GetRandom": [500_000]}
    assert r.functions["tpm2_get_random"].samples_ns == [510_000]


def test_inner_transmit_layers_are_not_counted_twice_and_missing_entries_close_frames():
    text = """\
 2)               |  tpm2_pcr_extend() {
 2)               |    tpm_transmit_cmd() {
 2)               |      tpm_transmit() {
 2) # 1500.000 us |        tpm_try_transmit();
 2) # 1501.000 us |      }
 2) # 1502.000 us |    }
 2)               |    tpm2_flush_context() {
 2) # 1600.000 us |  } /* tpm2_pcr_extend */
"""
    r = parse(text)
    assert samples(r.operations) == {"PCR_Extend": [1_502_000]}
    assert r.functions["tpm2_pcr_extend"].samples_ns == [1_600_000]
    assert "tpm2_flush_context" not in r.functions  # its exit never came


def test_function_arguments_and_open_calls_at_end():
    text = " 0)               |  tpm2_pcr_extend(chip=0xffff88810, pcr_idx=10) {\n" \
           " 0) # 1234.567 us |    tpm_transmit_cmd(chip=0xffff88810, buf=0xffffc9, desc=0xffffffff82);\n"
    r = parse(text)
    assert samples(r.operations) == {"PCR_Extend": [1_234_567]}
    assert "1 call(s) still open at the end of the trace (no duration)" in r.notes


def test_marks_that_disagree_are_noted():
    r = parse(" 0) * 5.000 us    |  x();\n")
    assert r.functions["x"].samples_ns == [5_000]
    assert "1 duration mark(s) disagree with their value" in r.notes


@pytest.mark.parametrize("body, lineno, why", [
    (" 0) # 1.2.3 us |  x();\n", 1, "unreadable DURATION cell"),
    (" 0)               |  x();\n", 1, "a leaf call without a duration"),
    (" 0)   1.000 us    |  x() {\n", 1, "a function entry with a duration"),
    (" 0)   1.000 us    |  x();\nhello world\n", 2, "not a function_graph row"),
    (" 0)   1.000 us    |  x();\n 0)   2.000 us    |  ??\n", 2, "unreadable FUNCTION column"),
])
def test_unreadable_lines_name_the_line(body, lineno, why):
    with pytest.raises(UsageError) as e:
        parse(body)
    assert str(e.value).startswith(f"t.txt:{lineno}: {why}")


def test_load_trace_rejects_other_text(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("# a comment\nsome log line\n")
    with pytest.raises(UsageError, match=r"x.txt:2: neither ftrace"):
        load_trace(str(p))
    p.write_bytes(b"# tracer: function_graph\n\xff\xfe\n")
    with pytest.raises(UsageError, match=r"x.txt:2: not a text trace"):
        load_trace(str(p))


def test_trace_parsers_do_not_import_the_loader():
    """#11 item 5: boot/traces.py imports the parsers; the parsers import only the model
    (boot/series.py), so there is no import cycle between them."""
    import subprocess
    import sys

    code = ("import sys, tpmtop.boot.ftrace, tpmtop.boot.bpftrace; "
            "print('tpmtop.boot.traces' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- #16 item 1: a call that migrates CPU ----------------------------------------------------
# Both fixtures hold the same events: systemd-1's HMAC extend moves from CPU 0 to CPU 1 inside
# tpm_transmit(); rngd-640 opens tpm_get_random() on CPU 0 meanwhile. Figures read off the file.
MIGRATED_OPS = {
    "ContextLoad": [36_976_990],
    "StartAuthSession": [84_746_510],
    "FlushContext": [3_195_083],
    "PCR_Extend (HMAC session)": [24_357_000],  # the outermost layer, tpm_transmit_cmd, on CPU 1
    "GetRandom": [500_000],
}
MIGRATED_FUNCS = {
    "tpm2_pcr_extend": [149_303_000], "tpm2_start_auth_session": [124_927_000],
    "tpm_transmit": [24_350_000], "tpm_transmit_cmd": sorted([36_976_990, 84_746_510, 3_195_083, 24_357_000, 500_000]),
    "tpm_buf_append_hmac_session": [2_254], "tpm_buf_fill_hmac_session": [3_546],
    "tpm_buf_check_hmac_response": [3_496], "tpm2_get_random": [504_000], "tpm_get_random": [19_816_000],
}


@pytest.mark.parametrize("name, how", [
    ("ftrace-graph-migrate-task.txt", "(followed by the TASK/PID column)"),
    ("ftrace-graph-migrate-notask.txt", "(matched to the open call by name, depth and time)"),
])
def test_call_that_migrates_cpu_is_one_command(name, how):
    r = load_trace(str(TRACES / name))
    assert samples(r.operations) == MIGRATED_OPS
    assert {k: sorted(v) for k, v in samples(r.functions).items()} == MIGRATED_FUNCS
    assert r.hmac_seen
    assert f"3 call(s) returned on another CPU than they started on {how}" in r.notes
    assert not any("still open" in n or "entry was not in the trace" in n for n in r.notes)


def test_migrated_exit_is_matched_by_its_duration_when_two_calls_could_be_it():
    """f() is open on CPU 0 (since 1.0 s) and on CPU 2 (since 1.5 s); an exit of f on CPU 1 at
    2.0 s lasting 500,000 µs is CPU 2's call, the other f stays open."""
    text = """\
    1.000000 |   0)               |  f() {
    1.500000 |   2)               |  f() {
    2.000000 |   1)  @ 500000.0 us |  } /* f */
"""
    r = parse(text)
    assert r.functions["f"].samples_ns == [500_000_000]
    assert "1 call(s) returned on another CPU than they started on (matched to the open call by name, " \
           "depth and time)" in r.notes
    assert "1 call(s) still open at the end of the trace (no duration)" in r.notes


def test_context_switch_banner_names_the_task_without_a_task_column():
    """verif_pid()'s banner says which task runs on a CPU from then on: with it, a call that
    returns on another CPU is followed by task even without funcgraph-proc and without tails."""
    text = """\
 0)               |  tpm2_pcr_extend() {
 0)               |    tpm_transmit_cmd() {
 ------------------------------------------
 0)  systemd-1    =>   rngd-640
 ------------------------------------------

 0)               |  tpm2_get_random() {
 ------------------------------------------
 1)  kworker-77   =>  systemd-1
 ------------------------------------------

 1) # 6000.000 us |    }
 1) # 6100.000 us |  }
 0) ! 500.000 us  |    tpm_transmit_cmd();
 0) ! 510.000 us  |  }
"""
    r = parse(text)
    assert samples(r.operations) == {"PCR_Extend": [6_000_000], "GetRandom": [500_000]}
    assert r.functions["tpm2_pcr_extend"].samples_ns == [6_100_000]
    assert r.functions["tpm2_get_random"].samples_ns == [510_000]


def test_many_gaps_do_not_keep_every_parked_chain(monkeypatch):
    """Lost exits park a chain at every outermost call; only the newest are kept for matching,
    the others' open calls are counted as still open."""
    import tpmtop.boot.ftrace as ft

    monkeypatch.setattr(ft, "MAX_CHAINS", 4)
    text = "".join(" 0)               |  f() {\n 0)               |    g() {\n" for _ in range(10))
    r = parse(text)
    assert "20 call(s) still open at the end of the trace (no duration)" in r.notes
    assert r.functions == {}


def test_the_importer_streams_and_stops_at_a_bad_line_before_the_file_ends(tmp_path):
    """#12 item 16: the trace is read line by line — a bad line 3 is reported while the writer
    of a FIFO is still writing, where reading the whole file first would wait for its end."""
    import os
    import threading

    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    release = threading.Event()
    state = {"closed": False}

    def writer():
        with open(fifo, "w") as f:
            f.write("# tracer: function_graph\n 0)               |  f() {\n 0) # oops us |  }\n")
            f.flush()
            release.wait(60)  # hold the FIFO open until the reader has answered (or 60 s)
            state["closed"] = True

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        with pytest.raises(UsageError, match=r":3: unreadable DURATION cell"):
            load_trace(str(fifo))
        assert not state["closed"]
    finally:
        release.set()
        t.join(60)
