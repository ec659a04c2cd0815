"""The raw TPM's turns as the proxy's event loop pumps them: who is granted, when, and who is
refused (a clock the test moves; no thread waits)."""

from __future__ import annotations

from tpmtop.proxy.turns import Turns


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Waiter:
    def __init__(self, name: str, said: list[str]):
        self.name, self.said = name, said

    def turn_granted(self, waited_ns: int) -> None:
        assert waited_ns > 0
        self.said.append(f"{self.name} granted")

    def turn_refused(self, why: str) -> None:
        self.said.append(f"{self.name} refused: {why}")


def _pump(turns: Turns) -> float | None:
    granted, refused, due = turns.pump()
    for w, waited in granted:
        w.turn_granted(waited)
    for w, why in refused:
        w.turn_refused(why)
    return due


def test_the_holder_keeps_its_turn_and_others_queue_in_order():
    clock, said = Clock(), []
    turns = Turns(idle_s=2.0, max_wait_s=60.0, clock=clock)
    a, b, c = object(), object(), object()
    assert turns.ask(a, Waiter("a", said))
    assert not turns.ask(b, Waiter("b", said))
    assert not turns.ask(c, Waiter("c", said))
    assert turns.ask(a, Waiter("a2", said))  # the holder's next command goes at once
    assert turns.waiting == 2
    turns.done(a)
    assert _pump(turns) == 160.0  # a has a command in flight: only the waiters' deadline is due
    turns.done(a)
    due = _pump(turns)
    assert said == [] and due == 102.0  # idle, but not for 2 s yet
    clock.t = 102.0
    _pump(turns)
    assert said == ["b granted"] and turns.holder is b  # FIFO: b asked before c
    turns.release(b)  # b's process left: the turn passes at once
    _pump(turns)
    assert said == ["b granted", "c granted"]


def test_a_waiter_is_refused_after_the_longest_wait_and_when_its_client_leaves():
    clock, said = Clock(), []
    turns = Turns(idle_s=2.0, max_wait_s=5.0, clock=clock)
    a, b, c = object(), object(), object()
    assert turns.ask(a, Waiter("a", said))
    assert not turns.ask(b, Waiter("b", said))
    clock.t += 1
    assert not turns.ask(c, Waiter("c", said))
    assert _pump(turns) == 105.0  # b's deadline first (a holds the turn, busy)
    turns.release(c)
    _pump(turns)
    assert said == ["c refused: it left while waiting for its turn"]
    clock.t = 105.0
    _pump(turns)
    assert said[-1] == "b refused: waited 5 s for its turn" and turns.waiting == 0
    assert turns.holder is a


def test_every_command_of_the_granted_client_goes_and_closing_refuses_the_rest():
    clock, said = Clock(), []
    turns = Turns(idle_s=0.5, max_wait_s=60.0, clock=clock)
    a, b, c = object(), object(), object()
    assert turns.ask(a, Waiter("a", said))
    assert not turns.ask(b, Waiter("b1", said))
    assert not turns.ask(b, Waiter("b2", said))  # a second connection of the same process
    assert not turns.ask(c, Waiter("c", said))
    assert turns.waiting == 2
    turns.done(a)
    clock.t += 0.5
    _pump(turns)
    assert said == ["b1 granted", "b2 granted"]
    turns.close()
    _pump(turns)
    assert said[-1] == "c refused: the proxy is stopping"
    assert not turns.ask(a, Waiter("late", said))
    _pump(turns)
    assert said[-1] == "late refused: the proxy is stopping"


def test_a_polling_holder_passes_the_turn_on_after_the_longest_turn():
    """Issue 50: a client that sends a command every second is never idle for idle_s, so it
    kept the turn while another waited, until it exited. With max_turn_s the waiting client
    gets the TPM once the holder has held it that long (after its command in flight), and the
    holder's next command waits behind it."""
    clock, said = Clock(), []
    turns = Turns(idle_s=2.0, max_wait_s=60.0, clock=clock, max_turn_s=5.0)
    poller, other = object(), object()
    assert turns.ask(poller, Waiter("p", said))
    turns.done(poller)
    assert not turns.ask(other, Waiter("o", said))
    for _ in range(4):  # a command a second: never idle for 2 s
        clock.t += 1.0
        assert _pump(turns) is not None and said == []
        assert turns.ask(poller, Waiter("p", said))
        turns.done(poller)
    clock.t += 0.5  # 4.5 s into its turn: still its own
    assert turns.ask(poller, Waiter("p", said))
    assert _pump(turns) is not None and said == []  # in flight: never cut mid-command
    turns.done(poller)
    due = _pump(turns)
    assert said == [] and due == 105.0  # the turn's end is what is due next
    clock.t = 105.0
    assert not turns.ask(poller, Waiter("p-late", said))  # over its turn while other waits: queued
    _pump(turns)
    assert said == ["o granted"] and turns.holder is other
    turns.done(other)
    turns.release(other)
    _pump(turns)
    assert said == ["o granted", "p-late granted"]


def test_no_longest_turn_when_it_is_off_or_nobody_waits():
    clock, said = Clock(), []
    alone = Turns(idle_s=2.0, max_wait_s=600.0, clock=clock, max_turn_s=5.0)
    poller, other = object(), object()
    for _ in range(30):  # nobody waits: the turn stays its own however long
        clock.t += 1.0
        assert alone.ask(poller, Waiter("p", said))
        alone.done(poller)
    assert alone.holder is poller
    off = Turns(idle_s=2.0, max_wait_s=600.0, clock=clock, max_turn_s=0.0)
    assert off.ask(poller, Waiter("p", said))
    off.done(poller)
    assert not off.ask(other, Waiter("o", said))
    for _ in range(30):  # off: a polling holder keeps it while another waits
        clock.t += 1.0
        assert off.ask(poller, Waiter("p", said))
        off.done(poller)
        _pump(off)
    assert said == [] and off.holder is poller
