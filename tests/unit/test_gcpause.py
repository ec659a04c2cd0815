"""The collector's pause is counted: it comes back when the last holder lets go, from any
thread, and never turns on a collector that was off before the first pause."""

from __future__ import annotations

import gc
import threading

import pytest

from tpmtop import gcpause


@pytest.fixture(autouse=True)
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_last_holder_turns_it_back_on():
    gcpause.pause()
    gcpause.pause()  # a second holder (the owner thread's job under a key's pause)
    assert not gc.isenabled()
    gcpause.resume()
    assert not gc.isenabled(), "the first resume turned the collector on under the other holder"
    gcpause.resume()
    assert gc.isenabled()


def test_holders_on_other_threads():
    gcpause.pause()
    started, release = threading.Event(), threading.Event()

    def job():
        with gcpause.paused():
            started.set()
            release.wait(60)

    t = threading.Thread(target=job)
    t.start()
    assert started.wait(60)
    gcpause.resume()  # this thread lets go first
    assert not gc.isenabled()
    release.set()
    t.join(60)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    with gcpause.paused():
        pass
    assert not gc.isenabled()


def test_an_unmatched_resume_is_a_bug_said_at_once():
    with pytest.raises(RuntimeError):
        gcpause.resume()
