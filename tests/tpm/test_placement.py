"""With the placement knob on, a private swtpm runs on the CPU of the thread that sends it a
command (tpmtop.tpm.placement); a swtpm tpmtop did not start is never moved, and neither is a
process that has ended. With it off (the default) nothing is moved."""

import os
import subprocess
import threading

import pytest

from tests.helpers.processes import TcpSwtpm
from tpmtop import settings
from tpmtop.tpm import placement
from tpmtop.tpm.busypoll import AnswerBudget
from tpmtop.tpm.sim import GET_RANDOM_8, Swtpm
from tpmtop.tpm.transport import SocketBackend, connect_tcp

CPUS = sorted(os.sched_getaffinity(0))
WARM = settings.Settings().placement_warm
pytestmark = pytest.mark.skipif(len(CPUS) < 2, reason="one CPU: swtpm shares it already, nothing is moved")


def _from_cpu(cpu: int, fn, *args, stay: bool = True):
    """Run ``fn`` on a thread held on ``cpu`` (only that thread: the test's own is not pinned);
    ``stay`` False: moved to ``cpu``, then free to run anywhere again, as any thread is."""
    out: list = []

    def run():
        os.sched_setaffinity(0, {cpu})  # 0: the calling thread
        if not stay:
            os.sched_setaffinity(0, set(CPUS))
        try:
            out.append(fn(*args))
        except BaseException as e:  # handed to the test
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    assert not t.is_alive()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def _swtpm_cpus(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")]


def _random(backend: SocketBackend, n: int = 1) -> list[bytes]:
    return [backend.transact(GET_RANDOM_8) for _ in range(n)]


@pytest.fixture
def placement_on():
    settings.use(settings.Settings(placement=True))
    yield
    settings.use(None)


@pytest.fixture
def sim(placement_on):
    s = Swtpm().start()
    yield s
    s.stop()


def test_by_default_a_private_swtpm_stays_where_the_scheduler_puts_it():
    settings.use(None)
    s = Swtpm().start()
    try:
        backend = s.backend()
        assert backend._follow is None
        before = _swtpm_cpus(s.pid)
        for cpu in (CPUS[0], CPUS[-1]):
            assert all(r[6:10] == b"\0\0\0\0" for r in _from_cpu(cpu, _random, backend, WARM + 20))
        assert _swtpm_cpus(s.pid) == before == [set(CPUS)] * len(before)
    finally:
        s.stop()


def test_a_private_swtpm_follows_the_thread_that_talks_to_it(sim):
    a, b = CPUS[0], CPUS[-1]
    backend = sim.backend()
    before = _swtpm_cpus(sim.pid)
    # the first commands (a short command: `tpmtop info`) leave swtpm where it started
    _random(backend, WARM)
    assert _swtpm_cpus(sim.pid) == before and all(c == set(CPUS) for c in before)
    backend._answers = AnswerBudget()  # what the transport learns from here on
    for cpu in (a, b, a):
        answers = _from_cpu(cpu, _random, backend, 20)
        assert all(r[6:10] == b"\0\0\0\0" and len(r) == 20 for r in answers)  # 8 random bytes each
        assert _swtpm_cpus(sim.pid) == [{cpu}] * len(before)
    # on its CPU, the answer is waited for asleep: a poll would hold the CPU swtpm needs
    assert backend._answers._slept and not backend._answers._polled


def test_a_swtpm_tpmtop_did_not_start_stays_where_it_runs():
    sw = TcpSwtpm()
    try:
        backend = SocketBackend(connect_tcp("127.0.0.1", sw.port), "swtpm")
        for cpu in CPUS[:2]:
            assert all(r[6:10] == b"\0\0\0\0" for r in _from_cpu(cpu, _random, backend, 20))
        assert _swtpm_cpus(sw.proc.pid) == [set(CPUS)] * len(_swtpm_cpus(sw.proc.pid))
        backend.close()
    finally:
        sw.stop()


def test_a_caller_that_keeps_moving_is_held_on_swtpms_cpu_for_each_exchange_then_let_go(sim):
    a, b = CPUS[0], CPUS[-1]
    backend = sim.backend()
    follow = backend._follow
    assert isinstance(follow, placement.FollowCaller)
    _random(backend, WARM)
    during: list[tuple[set[int], set[int]]] = []  # (the caller's CPU set, swtpm's) while the answer is read
    after: list[set[int]] = []  # the caller's CPU set once transact() returned
    read = backend._read_response

    def reading():
        during.append((os.sched_getaffinity(0), _swtpm_cpus(sim.pid)[0]))
        return read()

    backend._read_response = reading

    def one():
        r = backend.transact(GET_RANDOM_8)
        after.append(os.sched_getaffinity(0))
        return r

    # threads free to run anywhere, each started on the other CPU: every command moves swtpm
    for i in range(20):
        held_before = follow.holds
        assert _from_cpu((a, b)[i % 2], one, stay=False)[6:10] == b"\0\0\0\0"
        if held_before:
            break
    assert follow.holds == 1
    # before the caller was found to keep moving it ran free; then it is held where swtpm is
    caller, swtpm = during[-1]
    assert len(swtpm) == 1 and caller == swtpm
    assert during[0][0] == set(CPUS)
    assert after == [set(CPUS)] * len(after)  # and always given its own CPU set back


def test_a_swtpm_that_ended_is_never_moved_even_when_its_pid_is_taken_again(monkeypatch):
    moved: list = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: moved.append(pid))
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: its pid is free for any other program
    other = subprocess.Popen(["sleep", "60"])  # another program, here given the freed pid
    try:
        proc.pid = other.pid
        follow = placement.FollowCaller(proc)
        for _ in range(WARM + 2):  # past the first commands, when it would first be moved
            assert follow.before() == placement.ELSEWHERE
        assert moved == []
    finally:
        other.kill()
        other.wait()

