"""The tuning knobs (tpmtop/settings.py): where their values come from, that each off switch
turns its tuning off, that a bad value is one line and exit status 2, that every capture of a
run records the knobs in force, and that docs/settings.md lists each one."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading

import msgspec
import pytest

from tests.helpers.paths import REPO
from tpmtop import settings
from tpmtop.settings import Settings
from tpmtop.tpm import holdclock
from tpmtop.tpm.busypoll import POLLING
from tpmtop.tpm.sim import GET_RANDOM_8, Swtpm


@pytest.fixture(autouse=True)
def _fresh():
    settings.use(None)
    yield
    settings.use(None)


def _tpmtop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TPMTOP_")}
    return subprocess.run([sys.executable, "-m", "tpmtop", *args], capture_output=True, text=True,
                          env=base | (env or {}), timeout=300)


def test_the_file_then_the_environment_then_set_each_beat_the_one_before(tmp_path):
    f = tmp_path / "settings.toml"
    f.write_text("placement = true\nplacement_hold = 100\nbusy_poll_cap_us = 50\n")
    env = {"TPMTOP_SETTINGS_FILE": str(f), "TPMTOP_PLACEMENT_HOLD": "200", "TPMTOP_BUSY_POLL": "off"}
    s = settings.load(env, ["busy_poll=on", "placement-warm=4"])
    assert (s.placement, s.placement_hold, s.busy_poll, s.busy_poll_cap_us, s.placement_warm) == \
        (True, 200, True, 50, 4)
    assert s.hold_clock is Settings().hold_clock  # untouched: the default


def test_the_file_is_found_under_xdg_config_home(tmp_path):
    (tmp_path / "tpmtop").mkdir()
    (tmp_path / "tpmtop" / "settings.toml").write_text("hold_clock = false\n")
    assert settings.load({"XDG_CONFIG_HOME": str(tmp_path)}).hold_clock is False
    assert settings.load({"XDG_CONFIG_HOME": str(tmp_path / "none")}) == Settings()


@pytest.mark.parametrize(("where", "text", "said"), [
    ("file", "placement_hold = 'lots'\n", "placement_hold"),
    ("file", "placemnet = true\n", "unknown setting 'placemnet'"),
    ("file", "placement = \n", "not valid TOML"),
    ("env", "TPMTOP_BUSY_POLL_CAP_US=0", "busy_poll_cap_us = '0'"),
    ("flag", "placement=maybe", "placement = 'maybe'"),
    ("flag", "nonsense", "expected NAME=VALUE"),
])
def test_a_bad_setting_is_one_line_and_exit_status_2_before_any_tpm_is_opened(tmp_path, where, text, said):
    f = tmp_path / "settings.toml"
    env = {"TPMTOP_SETTINGS_FILE": str(f)}
    args = ["-T", "swtpm:host=127.0.0.1,port=1", "info"]  # nothing listens there: opening it would say so
    if where == "file":
        f.write_text(text)
    elif where == "env":
        k, _, v = text.partition("=")
        env[k] = v
    else:
        args = ["--set", text, *args]
    p = _tpmtop(*args, env=env)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.splitlines()) == 1 and said in p.stderr and "Traceback" not in p.stderr
    assert "connect" not in p.stderr


def test_every_capture_of_a_run_records_the_knobs_in_force():
    p = _tpmtop("--sim", "--set", "busy_poll=off", "bench", "--op", "extend", "--modes", "none",
                "--engine", "native", "-n", "5", "--json", "-", env={"TPMTOP_PLACEMENT": "on"})
    assert p.returncode == 0, p.stderr
    cap = json.loads(p.stdout)
    assert cap["tuning"] == msgspec.structs.asdict(Settings(busy_poll=False, placement=True))
    from tpmtop.capture import validate_capture

    validate_capture(cap)  # the schema knows the member


def test_busy_poll_off_never_polls_for_an_answer():
    if not POLLING:
        pytest.skip("one CPU: nothing polls either way")
    for on in (True, False):
        settings.use(Settings(busy_poll=on))
        with Swtpm() as sim:
            backend = sim.backend()
            for _ in range(40):
                assert backend.transact(GET_RANDOM_8)[6:10] == b"\0\0\0\0"
            # the transport learns both ways while it may poll, and only the sleeping one if not
            assert bool(backend._answers._polled) is on
            assert backend._answers._slept


def _timer_slack_after_a_hold() -> int:
    """PR_GET_TIMERSLACK of a new thread that held once (sleep_until)."""
    out: list[int] = []

    def run():
        holdclock.sleep_until(0)  # a deadline already past: returns at once
        out.append(ctypes.CDLL(None).prctl(30, 0, 0, 0, 0))  # PR_GET_TIMERSLACK

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    return out[0]


def test_hold_clock_off_leaves_the_threads_timer_slack_as_the_kernel_set_it():
    if not sys.platform.startswith("linux"):
        pytest.skip("timer slack is Linux's")
    settings.use(Settings(hold_clock=True))
    assert _timer_slack_after_a_hold() == 1  # 1 ns: the hold clock's
    settings.use(Settings(hold_clock=False))
    assert _timer_slack_after_a_hold() > 1  # the kernel's default (50 µs), untouched


def test_docs_list_every_knob_with_its_variable_and_default():
    page = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    for name, _type, default, description in settings.describe():
        assert description, f"{name} has no description"
        row = next((ln for ln in page.splitlines() if ln.startswith(f"| `{name}`")), None)
        assert row is not None, f"docs/settings.md has no row for {name}"
        assert f"`TPMTOP_{name.upper()}`" in row and f"`{json.dumps(default)}`" in row, row
