"""bpftrace map import. Expected values are copied by hand from the trace text."""


import pytest

from tests.helpers.paths import TESTS
from tpmtop.boot.bpftrace import parse_bpftrace, split_key
from tpmtop.boot.traces import load_trace
from tpmtop.errors import UsageError

TRACES = TESTS / "fixtures" / "traces"


def parse(text: str, unit=None):
    return parse_bpftrace(text.splitlines(), "b.txt", unit=unit)


def test_published_hmac_sums_attributed_by_stack():
    r = load_trace(str(TRACES / "bpftrace-ima-extend-hmac.txt"))
    assert r.format == "bpftrace" and r.hmac_seen
    assert {k: v.sums for k, v in r.operations.items()} == {
        "FlushContext": [(3_128_177, None)],
        "PCR_Extend (HMAC session)": [(25_851_638, None)],
        "ContextLoad": [(35_928_108, None)],
        "StartAuthSession": [(84_616_611, None)],
    }
    # One probed function (the innermost frame) carries every value.
    assert list(r.functions) == ["tpm_transmit_cmd"]
    assert sorted(t for t, _ in r.functions["tpm_transmit_cmd"].sums) == [3_128_177, 25_851_638,
                                                                            35_928_108, 84_616_611]
    assert r.operations["ContextLoad"].calls is None  # a sum never pretends to be one call


def test_published_nohmac_sum():
    r = load_trace(str(TRACES / "bpftrace-ima-extend-nohmac.txt"))
    assert not r.hmac_seen
    assert {k: v.sums for k, v in r.operations.items()} == {"PCR_Extend": [(5_273_648, None)]}


def test_sum_per_call_needs_a_stated_call_count():
    r = load_trace(str(TRACES / "bpftrace-ima-extend-nohmac.txt"))
    s = r.operations["PCR_Extend"]
    assert s.per_call_ns()[0] is None
    assert s.per_call_ns(4)[0] == 5_273_648 / 4


def test_split_key_stacks_and_plain_parts():
    key = "\n    tpm_transmit_cmd+50\n    tpm2_pcr_extend+338\n, \n    0x7f03ea0ade55\n, cat"
    assert split_key(key) == [["tpm_transmit_cmd", "tpm2_pcr_extend"], ["0x7f03ea0ade55"], "cat"]
    assert split_key("\n    tpm_transmit_cmd+0x32\n, \n, sh") == [["tpm_transmit_cmd"], [], "sh"]
    assert split_key("tpm2_get_random, 12") == ["tpm2_get_random", "12"]


HIST = """\
Attaching 2 probes...
^C

@us[tpm2_pcr_extend]:
[0]                    1 |@                                                   |
[1]                    0 |                                                    |
[2, 4)                 2 |@@                                                  |
[4K, 8K)              50 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[16M, 32M)             3 |@@@                                                 |

@lat[tpm2_start_auth_session]:
(..., 0)               1 |@                                                   |
[0, 100)               0 |                                                    |
[100000, 200000)       4 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[200000, ...)          2 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |
"""


def test_hist_and_lhist_blocks_with_suffixes_and_open_ends():
    r = parse(HIST)
    # The same run set up HMAC sessions (tpm2_start_auth_session below), so its extends used one.
    ext = r.operations["PCR_Extend (HMAC session)"]
    # @us: values in µs (the map name says so); K/M are powers of 1024.
    assert ext.buckets == [(0, 1_000, 1), (1_000, 2_000, 0), (2_000, 4_000, 2),
                           (4_096_000, 8_192_000, 50), (16_777_216_000, 33_554_432_000, 3)]
    assert ext.calls == 56
    sas = r.operations["StartAuthSession"]
    # @lat: no unit in the name, so ns.
    assert sas.buckets == [(None, 0, 1), (0, 100, 0), (100_000, 200_000, 4), (200_000, None, 2)]
    assert sas.calls == 7
    assert r.hmac_seen
    assert r.functions["tpm2_pcr_extend"].calls == 56


def test_stats_values_carry_their_count_and_plain_keys_attribute():
    r = parse("@ns[tpm2_flush_context]: count 4, average 3000, total 12000\n"
              "@ns[kprobe:tpm2_get_random]: 7000\n@total: 99\n")
    assert r.operations["FlushContext"].sums == [(12_000, 4)]
    assert r.operations["FlushContext"].per_call_ns() == (3_000.0, "sum 12000 ns / 4 calls")
    assert r.operations["GetRandom"].sums == [(7_000, None)]
    assert r.functions["@total"].sums == [(99, None)]


def test_unit_option_for_unnamed_maps():
    r = parse("@[tpm2_pcr_extend]: 25\n", unit="ms")
    assert r.operations["PCR_Extend"].sums == [(25_000_000, None)]


def test_stack_keyed_hist():
    text = "@us[\n    tpm_transmit_cmd+50\n    tpm2_load_context+161\n]:\n[32K, 64K)  3 |@@@|\n"
    r = parse(text)
    assert r.operations["ContextLoad"].buckets == [(32 * 1024 * 1000, 64 * 1024 * 1000, 3)]


@pytest.mark.parametrize("body, lineno, why", [
    ("@x[a]: lots\n", 1, "unreadable map value"),
    ("[0, 4)   3 |@@@|\n", 1, "histogram row outside"),
    ("@x[a]: 1\nTracing TPM... Hit Ctrl-C to end.\n", 2, "not bpftrace map output"),
    ("@[\n    tpm_transmit_cmd+50\n", 1, "map key never closed"),
    ("@h:\n[8, 4)   3 |@@@|\n", 2, "histogram bucket with upper bound"),
])
def test_unreadable_lines_name_the_line(body, lineno, why):
    with pytest.raises(UsageError) as e:
        parse(body)
    assert str(e.value).startswith(f"b.txt:{lineno}: {why}")
