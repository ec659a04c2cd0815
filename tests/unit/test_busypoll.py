"""Polling for a fast TPM's answer (tpmtop.tpm.busypoll): what is polled for, for how long, and
that a receive still gets every byte, the close, and nothing made up."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from tests.helpers.paths import REPO
from tpmtop import settings
from tpmtop.settings import Settings
from tpmtop.tpm import busypoll
from tpmtop.tpm.busypoll import POLL_CAP_NS, AnswerBudget, RequestPoll, recv_soon

GET_RANDOM = bytes.fromhex("0000017b")
CREATE_PRIMARY = bytes.fromhex("00000131")


@pytest.fixture
def polling(monkeypatch):
    """A machine that may poll, with the busy_poll knob on (off by default: tpmtop.settings)."""
    monkeypatch.setattr(busypoll, "POLLING", True)
    settings.use(Settings(busy_poll=True))
    yield
    settings.use(None)


def test_an_unseen_command_is_polled_for_up_to_the_cap_then_waited_for_once(polling):
    b = AnswerBudget()
    assert b.budget(GET_RANDOM) == POLL_CAP_NS
    b.learn(GET_RANDOM, 30_000, polled=True)
    assert b.budget(GET_RANDOM) == 0  # then a sleep, to know what that costs here
    assert b.budget(CREATE_PRIMARY) == POLL_CAP_NS  # learnt per command code


def _uses(b: AnswerBudget, cc: bytes, n: int = 64) -> list[int]:
    return [b.budget(cc) for _ in range(n)]


def test_polling_is_used_where_it_is_faster_and_sleeping_is_tried_now_and_then(polling):
    # the TPM on another CPU of an idle VM: the answer while we poll 23 µs, after a sleep 80 µs
    b = AnswerBudget()
    b.learn(GET_RANDOM, 23_000, polled=True)
    b.learn(GET_RANDOM, 80_000, polled=False)
    uses = _uses(b, GET_RANDOM)
    assert uses.count(46_000) == 62 and uses.count(0) == 2  # twice the faster wait; one in 32 sleeps


def test_sleeping_is_used_where_the_tpm_waits_for_our_cpu(polling):
    # swtpm put on the CPU we poll on: it answers only once the poll gives up (219 µs), while
    # sleeping at once hands it the CPU (13 µs)
    b = AnswerBudget()
    b.learn(GET_RANDOM, 219_000, polled=True)
    b.learn(GET_RANDOM, 13_000, polled=False)
    uses = _uses(b, GET_RANDOM)
    assert uses.count(0) == 62 and uses.count(26_000) == 2  # a short poll, one in 32, to notice a change


def test_the_choice_follows_the_machine(polling):
    b = AnswerBudget()
    b.learn(GET_RANDOM, 219_000, polled=True)
    b.learn(GET_RANDOM, 13_000, polled=False)
    for _ in range(20):  # the explored polls now answer fast: the load moved swtpm elsewhere
        b.learn(GET_RANDOM, 10_000, polled=True)
    assert _uses(b, GET_RANDOM, 31).count(0) <= 1


def test_a_slow_command_is_never_polled_for(polling):
    b = AnswerBudget()
    b.learn(CREATE_PRIMARY, 40_000_000, polled=True)  # a key generation: milliseconds
    b.learn(CREATE_PRIMARY, 39_000_000, polled=False)
    assert set(_uses(b, CREATE_PRIMARY)) == {0}


def test_nothing_is_polled_for_when_polling_is_off(polling, monkeypatch):
    monkeypatch.setattr(busypoll, "POLLING", False)
    assert AnswerBudget().budget(GET_RANDOM) == 0
    assert RequestPoll().budget() == 0


def test_nothing_is_polled_for_with_the_knob_off_the_default(monkeypatch):
    monkeypatch.setattr(busypoll, "POLLING", True)
    settings.use(None)
    assert Settings().busy_poll is False
    assert AnswerBudget().budget(GET_RANDOM) == 0
    assert RequestPoll().budget() == 0


def test_a_client_that_pauses_is_polled_for_less_and_less(polling):
    p = RequestPoll()
    assert p.budget() == POLL_CAP_NS
    polled = []
    for _ in range(300):
        budget = p.budget()
        polled.append(budget > 0)
        if budget:
            p.came(False)  # its request did not come within the poll
    # skips 1, 2, 4 … 64 requests between polls: at most one poll in 64 once backed off
    assert sum(polled[-128:]) <= 2
    p.came(True)
    while not p.budget():
        pass
    assert p.budget() == POLL_CAP_NS  # a request in time: polled for again at once


def test_a_raw_connection_waits_for_its_first_requests_without_polling(polling):
    p = RequestPoll(skip=1)
    assert p.budget() == 0
    assert p.budget() == POLL_CAP_NS


def test_recv_soon_returns_what_arrived_the_close_or_none():
    a, b = socket.socketpair()
    try:
        assert recv_soon(a, 16, 50_000) is None  # nothing sent: gives up after its budget
        b.sendall(b"\x80\x01" + b"x" * 8)
        assert recv_soon(a, 16, POLL_CAP_NS) == b"\x80\x01" + b"x" * 8
        b.sendall(b"peek")
        assert recv_soon(a, 4, POLL_CAP_NS, socket.MSG_PEEK) == b"peek"
        assert a.recv(4) == b"peek"  # peeked, not taken
        b.close()
        assert recv_soon(a, 16, POLL_CAP_NS) == b""
    finally:
        a.close()


def test_an_answer_sent_while_polling_is_received_whole():
    a, b = socket.socketpair()
    try:
        started = threading.Event()

        def answer():
            started.wait(10)
            b.sendall(b"answer")

        t = threading.Thread(target=answer)
        t.start()
        got = None
        for _ in range(1000):  # until one poll overlaps the send; a sleep in between is fine too
            started.set()
            got = recv_soon(a, 16, POLL_CAP_NS)
            if got is not None:
                break
        if got is None:
            got = a.recv(16)
        t.join(10)
        assert got == b"answer"
    finally:
        a.close()
        b.close()


def test_one_cpu_turns_polling_off():
    # the TPM's process needs a CPU while tpmtop waits: with one, polling could only delay it
    code = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); " \
           "from tpmtop.tpm import busypoll; print(busypoll.POLLING)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "False"
