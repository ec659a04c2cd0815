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
from tpmtop.tpm import busypoll
from tpmtop.tpm.busypoll import POLL_CAP_NS, AnswerBudget, RequestPoll, recv_soon

GET_RANDOM = bytes.fromhex("0000017b")
CREATE_PRIMARY = bytes.fromhex("00000131")


@pytest.fixture
def polling(monkeypatch):
    monkeypatch.setattr(busypoll, "POLLING", True)


def test_an_unseen_command_is_polled_for_up_to_the_cap(polling):
    assert AnswerBudget().budget(GET_RANDOM) == POLL_CAP_NS


def test_a_fast_command_is_polled_for_twice_its_recent_time(polling):
    b = AnswerBudget()
    for _ in range(20):
        b.learn(GET_RANDOM, 30_000)
    assert b.budget(GET_RANDOM) == 60_000
    assert b.budget(CREATE_PRIMARY) == POLL_CAP_NS  # learnt per command code


def test_a_slow_command_is_not_polled_for_until_it_is_fast_again(polling):
    b = AnswerBudget()
    b.learn(CREATE_PRIMARY, 40_000_000)  # a key generation: milliseconds
    assert b.budget(CREATE_PRIMARY) == 0
    for _ in range(40):
        b.learn(CREATE_PRIMARY, 30_000)
    assert 0 < b.budget(CREATE_PRIMARY) <= POLL_CAP_NS


def test_nothing_is_polled_for_when_polling_is_off(monkeypatch):
    monkeypatch.setattr(busypoll, "POLLING", False)
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
