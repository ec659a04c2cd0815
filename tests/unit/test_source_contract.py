"""Each of the four dashboard sources against :class:`tpmtop.sources.protocol.Source`'s roles:
every member the view-model and the CLI use is there, with the type its annotation says; a
source that cannot do a thing refuses it in one clear line (a UsageError) rather than lacking
the method (psutil's tests/test_contracts.py does this for its platforms). Each role stays
small and typed: at most 12 members, no Any."""

from __future__ import annotations

import inspect
import re

import pytest

from tests.helpers.paths import TESTS
from tpmtop.connect import open_tpm
from tpmtop.errors import UsageError
from tpmtop.kernel.tap import KernelTap
from tpmtop.sources.kernel import KernelSource
from tpmtop.sources.live import LiveSource
from tpmtop.sources.passive import PassiveSource, Sysfs
from tpmtop.sources.protocol import (
    Capabilities,
    Export,
    Feed,
    HeaderInfo,
    Role,
    Runs,
    Source,
    SourceKind,
    TpmControl,
    Where,
    Workload,
)
from tpmtop.sources.protocol import Source as SourceContract
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.sources.timings import TimingsView

FIXTURE = TESTS / "tui_fixtures" / "slb9670-extend.json"
ROLES = (Feed, Runs, TpmControl, Workload, Export, Where)


def members(role: type) -> dict[str, str]:
    """A role's own members (name -> its annotation or signature, as written)."""
    out = {n: str(a) for n, a in vars(role).get("__annotations__", {}).items() if not n.startswith("_")}
    for n, v in vars(role).items():
        if n.startswith("_"):
            continue
        if isinstance(v, property):
            out[n] = str(inspect.signature(v.fget))
        elif callable(v):
            out[n] = str(inspect.signature(v))
    return out


METHODS = [n for role in ROLES for n, v in vars(role).items() if callable(v) and not n.startswith("_")]
ATTRIBUTES = [n for role in ROLES for n in members(role) if n not in METHODS]


def test_each_role_is_small_and_typed():
    """At most 12 members a role, none typed Any; Source adds nothing of its own to the roles."""
    for role in ROLES:
        own = members(role)
        assert 0 < len(own) <= 12, (role.__name__, len(own), sorted(own))
        untyped = {n: a for n, a in own.items() if re.search(r"\bAny\b", a)}
        assert not untyped, (role.__name__, untyped)
    assert not members(SourceContract)
    assert set(SourceContract.__mro__) >= set(ROLES)
    names = [n for role in ROLES for n in members(role)]
    assert len(names) == len(set(names)), "a member in two roles"


def test_capabilities_say_which_roles_do_something():
    assert Capabilities(SourceKind.PASSIVE).roles == {Role.FEED}
    live = Capabilities(SourceKind.LIVE, live=True, handles=True, timings=True, workload=True, export=True)
    assert live.roles == set(Role)
    replay = Capabilities(SourceKind.REPLAY, timings=True)
    assert replay.roles == {Role.FEED, Role.RUNS, Role.EXPORT}  # a capture exports itself


@pytest.fixture(params=["live", "replay", "passive", "kernel"])
def source(request, tmp_path):
    if request.param == "live":
        src = LiveSource(open_tpm(sim=True), start_running=False)
    elif request.param == "replay":
        src = ReplaySource(load(FIXTURE), FIXTURE)
    elif request.param == "passive":
        src = PassiveSource(Sysfs(tmp_path))
    else:
        trace = tmp_path / "trace"
        trace.write_text("")
        src = KernelSource(KernelTap(trace_path=str(trace)), Sysfs(tmp_path))
    yield src
    src.close()


def test_every_member_a_consumer_uses_is_there(source):
    assert isinstance(source, Source)
    missing = [n for n in METHODS + ATTRIBUTES if not hasattr(source, n)]
    assert not missing, f"{type(source).__name__} lacks {missing}"
    assert isinstance(source.caps, Capabilities)
    for name in ("engine", "mode", "op", "tcti"):
        assert isinstance(getattr(source, name), str), name
    for name in ("connected", "running", "read_only", "simulated", "kernel_device"):
        assert isinstance(getattr(source, name), bool), name
    assert isinstance(source.header(), HeaderInfo)
    assert isinstance(source.timings(), TimingsView)
    assert isinstance(source.runs(), list)
    assert isinstance(source.proxy_log, list) and isinstance(source.boundaries, list)


def test_what_a_source_cannot_do_it_refuses_in_one_line(source):
    caps = source.caps
    if not caps.export and not caps.timings:  # nothing a capture could hold
        with pytest.raises(UsageError):
            source.capture()
    if not caps.handles:
        with pytest.raises(UsageError):
            source.poll()
    if not caps.changes_tpm:
        with pytest.raises(UsageError):
            source.flush(0x80000000)
    if caps.timings and not caps.live:  # a capture: its whole stream, its own events, itself
        assert source.captured_stream().events and source.events()
        assert source.capture()["runs"]
