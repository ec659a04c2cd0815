"""One owner for the TPM, and a recorder that listens off the timed path (issue #11)."""

from __future__ import annotations

import subprocess
import sys
import threading

from tpmtop.sessions.workload import Workload
from tpmtop.tpm.exchange import Labels, current_labels, labelled
from tpmtop.tpm.handles import list_handles
from tpmtop.tpm.identity import read_variable


def test_exchanges_are_decoded_between_jobs_never_inside_one(tpm):
    """Inside a job the recorder has only appended; decoding happens on the owner thread once
    the job is over."""
    rec = tpm.recorder
    wl = Workload(tpm, "native", "per-command", "extend")
    tpm.owner.call(wl.run_one)  # probe + warm-up, decoded afterwards

    def op_then_look():
        decoded_before = rec._seq
        wl.run_one()  # 4 commands on the wire
        return decoded_before, rec._seq, len(rec._pending)

    before, after, pending = tpm.owner.call(op_then_look)
    assert after == before, "the recorder decoded inside the operation"
    assert pending >= 4
    tpm.owner.call(lambda: None)  # a later job starts only after the gap's decoding
    assert not rec._pending and rec.decoded_on == "tpm-owner"
    ops = [e for e in rec.events() if e.op_seq == wl._op_seq]
    assert [e.name.removeprefix("TPM2_CC_") for e in ops] == [
        "ContextLoad", "StartAuthSession", "FlushContext", "PCR_Extend"]
    tpm.owner.call(wl.close)


def test_a_reader_sees_every_completed_exchange(tpm):
    """A reader never misses an exchange the transport already reported, decoded or not."""
    for _ in range(5):
        read_variable(tpm.transport)  # straight on the transport: nobody decodes between jobs
    assert len(tpm.recorder._pending) >= 5
    evs = tpm.recorder.events()
    assert sum(1 for e in evs if e.name == "TPM2_CC_GetCapability") >= 5 and not tpm.recorder._pending


def test_labels_travel_with_jobs_not_the_transport(tpm):
    """A poll and a workload submitted from two threads at once: each command carries its own
    job's origin, whatever the interleaving."""
    wl = Workload(tpm, "native", "none", "get_random")
    poll = Labels("poll")

    def polls():
        for _ in range(30):
            tpm.owner.call(list_handles, tpm.transport, labels=poll)

    t = threading.Thread(target=polls)
    t.start()
    for _ in range(30):
        tpm.owner.call(wl.run_one)
    t.join(60)
    evs = tpm.recorder.events()
    caps = [e for e in evs if e.name == "TPM2_CC_GetCapability"]
    rands = [e for e in evs if e.name == "TPM2_CC_GetRandom"]
    assert len(caps) >= 30 * 4 and {e.origin for e in caps} == {"poll"}
    assert len(rands) == 30 and {e.origin for e in rands} == {"workload"}
    assert {e.op_seq for e in rands} == set(range(rands[0].op_seq, rands[0].op_seq + 30))
    tpm.owner.call(wl.close)


def test_labels_are_scoped():
    assert current_labels().origin == "user"
    with labelled(origin="poll") as lab:
        assert current_labels() is lab and lab.origin == "poll"
        with labelled(op_seq=7):
            assert current_labels().origin == "poll" and current_labels().op_seq == 7
    assert current_labels().origin == "user"


def test_an_error_in_a_job_reaches_the_caller_and_the_owner_goes_on(tpm):
    def boom():
        raise ValueError("job failed")

    try:
        tpm.owner.call(boom)
    except ValueError as e:
        assert str(e) == "job failed"
    else:
        raise AssertionError("the job's exception was lost")
    assert tpm.call(read_variable)["HR_TRANSIENT_AVAIL"] == 3  # the owner still runs jobs


def test_the_transport_layer_never_imports_the_recorder():
    """tpmtop/tpm/* reports to a sink; it knows nothing above it."""
    code = ("import importlib, pkgutil, sys, tpmtop.tpm as p\n"
            "for m in pkgutil.iter_modules(p.__path__):\n"
            "    importlib.import_module('tpmtop.tpm.' + m.name)\n"
            "print(sorted(n for n in sys.modules if n.startswith('tpmtop.') and not n.startswith('tpmtop.tpm')"
            " and n not in ('tpmtop.errors', 'tpmtop.settings')))")  # leaves: the errors and the tuning knobs
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def _interrupt_at(k: int):
    """A trace function that raises Interrupted at the k-th trace event of this thread (a
    call, a line, a return in any Python frame): a signal handler raising exactly there."""
    from tpmtop.errors import Interrupted

    seen = [0]

    def trace(frame, event, arg):
        seen[0] += 1
        if seen[0] == k:
            raise Interrupted("stopped by SIGTERM")  # tracing stops; the exception propagates
        return trace

    return trace


def test_a_signal_anywhere_in_a_wait_never_blocks_the_owner(tpm):
    """The main thread waits for a job; a signal may raise at any bytecode line of that wait.
    Swept over every position: afterwards the owner must still run jobs. With
    concurrent.futures.Future, a raise right after Condition.__enter__ took the future's lock
    left it taken, and the owner blocked forever on it (a hung clean-up after Ctrl-C)."""
    gate = threading.Event()

    def job():
        gate.wait(0.01)  # long enough that the caller really waits
        return "done"

    interrupted = 0
    k = 1
    while True:
        sys.settrace(_interrupt_at(k))
        try:
            got = tpm.owner.call(job)
        except KeyboardInterrupt:
            got = None
            interrupted += 1
        finally:
            sys.settrace(None)
        # the owner is free: a job queued now runs (a time-out here, not a hang, if it is stuck)
        assert tpm.owner.call(lambda: 42, timeout=60) == 42, k
        if got == "done":
            break
        k += 1
        assert k < 10_000
    assert interrupted == k - 1 and interrupted > 3


def _interrupted_mid_job(tpm, handler, target_thread) -> str:
    """Run a job that blocks; once it runs, send SIGUSR1 (handled by ``handler``) to
    ``target_thread``. The wait must end with Interrupted before the job does: returns its text."""
    import signal

    from tpmtop.errors import Interrupted

    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def job():
        started.set()
        release.wait(30)
        finished.set()

    def kick():
        started.wait(60)
        signal.pthread_kill(target_thread().ident, signal.SIGUSR1)

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        threading.Thread(target=kick, daemon=True).start()
        try:
            tpm.owner.call(job)
        except Interrupted as e:
            why = str(e)
        else:
            raise AssertionError("the signal was never acted on")
        assert not finished.is_set(), "the wait ended only when the job did"
    finally:
        release.set()
        signal.signal(signal.SIGUSR1, old)
    assert tpm.owner.call(lambda: 42, timeout=60) == 42  # and the owner goes on
    return why


def test_a_signal_handled_by_another_thread_still_ends_the_wait(tpm):
    """The kernel may run a signal's C handler on any thread, or just before the main thread
    blocks: either way its Python handler is only pending, and a wait blocked in C never runs
    it. Delivered here to the owner thread, mid-job: the main thread must still stop waiting
    (it checks between slices), not when the job ends — on a silent TPM that is never."""
    from tpmtop.tpm import interrupts

    assert _interrupted_mid_job(tpm, interrupts.handler, lambda: tpm.owner._thread) == "stopped by SIGUSR1"


def test_a_signal_swallowed_on_the_way_still_ends_the_wait(tpm):
    """Python ignores an exception raised in a __del__, a weakref or a gc callback ("Exception
    ignored in …"); a signal handled while one runs is lost with it (seen: a SIGALRM landed in
    hypothesis' gc callback). Here the handler's Interrupted is swallowed as Python would;
    the wait must still stop, at its next slice, rather than when the job ends."""
    import signal

    from tpmtop.errors import Interrupted
    from tpmtop.tpm import interrupts

    def swallowed(signum, frame):
        try:
            interrupts.handler(signal.SIGTERM, frame)
        except Interrupted:
            pass  # what CPython does with an exception from a finalizer

    assert _interrupted_mid_job(tpm, swallowed, threading.main_thread) == "stopped by SIGTERM"


def _owner_closed_after_two_signals(first_job) -> tuple[bool, list]:
    """Close an owner whose queue holds ``first_job`` then a quick clean-up, after two
    signals came (as the CLI's handler counts them). Returns (ended in time, what ran)."""
    from tpmtop.tpm import interrupts
    from tpmtop.tpm.owner import TpmOwner

    owner = TpmOwner(transport=None, name="test-owner")
    ran: list = []
    owner.submit(first_job, ran)
    owner.submit(lambda: ran.append("flush"))
    before = interrupts.received
    interrupts.received = 2
    try:
        ended = owner.close(timeout=60)
    finally:
        interrupts.received = before
    return ended, ran


def test_after_two_signals_closing_does_not_wait_for_a_silent_tpm():
    """A job stuck on a TPM that does not answer, and the user has sent a second signal:
    closing gives it a short grace, not the full time-out. The stuck job is released 30 s
    later, so a close that waited for it (the 60 s time-out) would find the thread ended."""
    release = threading.Event()
    timer = threading.Timer(30, release.set)
    timer.daemon = True
    timer.start()

    def stuck(ran):
        release.wait(60)
        ran.append("answered")

    try:
        ended, ran = _owner_closed_after_two_signals(stuck)
        assert not ended and ran == [], "closing waited for the silent TPM"
    finally:
        timer.cancel()
        release.set()


def test_after_two_signals_a_tpm_that_answers_still_gets_its_clean_up():
    """The grace is for a TPM that answers: the job in flight and the clean-up queued behind
    it (a flush) both run before closing gives up."""
    ended, ran = _owner_closed_after_two_signals(lambda ran: ran.append("op"))
    assert ended and ran == ["op", "flush"]


def test_a_job_asked_for_off_the_main_thread_runs_there_when_the_owner_is_idle(tpm):
    """The fast path: no hand-over to the owner thread, and a job that asks for another (a
    poll reading the identity) runs it in place instead of waiting behind itself."""
    where: list = []

    def job():
        where.append(threading.current_thread().name)
        return tpm.owner.call(lambda: threading.current_thread().name)  # nested: in place

    out: list = []
    t = threading.Thread(target=lambda: out.append(tpm.owner.call(job)), name="asker")
    t.start()
    t.join(60)
    assert where == ["asker"] and out == ["asker"]
    assert tpm.owner.call(lambda: threading.current_thread().name) == "tpm-owner"  # main: hands over


def test_the_fast_path_waits_its_turn_and_keeps_labels(tpm):
    """While a job runs on the owner thread, a job asked for elsewhere queues behind it (FIFO);
    labels stamp the commands of a job run on the fast path as any other."""
    gate, started = threading.Event(), threading.Event()
    order: list = []
    blocker = tpm.owner.submit(lambda: (started.set(), gate.wait(60), order.append("first")))
    assert started.wait(60)
    t = threading.Thread(target=lambda: tpm.owner.call(lambda: order.append(threading.current_thread().name)),
                         name="asker")
    t.start()
    while tpm.owner._q.qsize() < 1:  # it queued rather than ran
        assert t.is_alive()
        threading.Event().wait(0.01)
    gate.set()
    blocker.result(60)
    t.join(60)
    assert order == ["first", "tpm-owner"]

    poll = Labels("poll")
    done = tpm.owner.run_now(read_variable, tpm.transport, labels=poll)  # main thread: queued
    assert done.result(60)["HR_TRANSIENT_AVAIL"] == 3
    box: list = []
    t = threading.Thread(target=lambda: box.append(tpm.owner.run_now(read_variable, tpm.transport, labels=poll)))
    t.start()
    t.join(60)
    assert box[0].done() and box[0].result()["HR_TRANSIENT_AVAIL"] == 3
    caps = [e for e in tpm.recorder.events() if e.name == "TPM2_CC_GetCapability"]
    assert len(caps) >= 2 and {e.origin for e in caps[-2:]} == {"poll"}


def test_no_job_runs_on_the_fast_path_after_close():
    """Closing ends the fast path too: a job asked for afterwards fails as a queued one would."""
    from tpmtop.errors import TpmConnectionError
    from tpmtop.tpm.owner import TpmOwner

    owner = TpmOwner(transport=None, name="test-owner")
    assert owner.close(timeout=60)
    out: list = []

    def ask():
        try:
            owner.call(lambda: "ran")
        except TpmConnectionError as e:
            out.append(str(e))

    t = threading.Thread(target=ask)
    t.start()
    t.join(60)
    assert out == ["the TPM connection is closed"]
