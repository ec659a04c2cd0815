"""x: a capture goes to tpmtop's data directory (never the current one), its full path is on
the screen at once, and no existing file is ever replaced. Real swtpm, nothing mocked."""

from __future__ import annotations

import datetime as dt
import os
import stat

from tests.helpers.tui import SIZE, message_line, until
from tpmtop.sources.export_file import export_capture, export_target
from tpmtop.sources.replay import load
from tpmtop.tui import messages as m
from tpmtop.tui.app import TpmtopApp


async def test_x_writes_into_the_private_data_dir_and_shows_the_path(live, tmp_path, monkeypatch):
    data = tmp_path / "data"  # does not exist yet: x creates it
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.chdir(cwd)
    src = live(start_running=True, rate=0, mode="none")
    seen: list = []
    app = TpmtopApp(src, theme="dark", remember=False)  # no export_dir: the data directory
    async with app.run_test(size=SIZE, message_hook=seen.append, notifications=True) as pilot:
        await until(pilot, lambda: any(a.ops >= 5 for a in src.accounts().values()), what="ops")
        await pilot.press("x")
        # The path is named when the key is handled, before the worker has written anything.
        await until(pilot, lambda: str(data / "tpmtop") in message_line(app.screen), what="the path on screen")
        await until(pilot, lambda: any(isinstance(x, m.CaptureExported) for x in seen), what="export")
        path = next(x.path for x in seen if isinstance(x, m.CaptureExported))
        await until(pilot, lambda: "capture written" in message_line(app.screen)
                    and str(path) in message_line(app.screen).replace("\n", ""), what="'capture written' with the path")
    assert path.parent == (data / "tpmtop").resolve()
    assert path.name.startswith("tpmtop-") and path.suffix == ".json"
    assert stat.S_IMODE(os.stat(data / "tpmtop").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o700  # a missing parent is made private too
    assert list(cwd.iterdir()) == []  # nothing left in the current directory
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no staging or temp file left
    assert load(path)["schema"] == "tpmtop.capture/1"
    assert app.exported == [str(path)]  # named again on the terminal when the dashboard ends


async def test_an_existing_file_is_never_replaced(live, tmp_path):
    """The name x shows is the first free one; if another file takes it before the capture is
    written, the capture goes to the next free name and the other file is left as it was."""
    now = dt.datetime(2026, 12, 2, 11, 30, 0)
    (tmp_path / "tpmtop-20261202-113000.json").write_text("someone else's")
    target = export_target(tmp_path, now)
    assert target.name == "tpmtop-20261202-113000-2.json"
    src = live(start_running=False)
    src.poll()  # the TPM answers: a capture names it
    cap = src.capture()
    target.write_text("taken meanwhile")  # between the key and the write
    path = export_capture(cap, target)
    assert path.name == "tpmtop-20261202-113000-2-2.json"
    assert (tmp_path / "tpmtop-20261202-113000.json").read_text() == "someone else's"
    assert target.read_text() == "taken meanwhile"
    assert load(path)["schema"] == "tpmtop.capture/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "tpmtop-20261202-113000-2-2.json", "tpmtop-20261202-113000-2.json", "tpmtop-20261202-113000.json"]


def test_two_presses_in_one_second_are_given_two_names(tmp_path):
    now = dt.datetime(2026, 12, 2, 11, 30, 0)
    first, second = export_target(tmp_path, now), export_target(tmp_path, now)
    assert (first.name, second.name) == ("tpmtop-20261202-113000.json", "tpmtop-20261202-113000-2.json")


def test_data_dir_follows_xdg_data_home(tmp_path, monkeypatch):
    from tpmtop.sources.export_file import data_dir

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert data_dir() == tmp_path / "tpmtop"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/is/ignored")  # the XDG spec: only absolute paths count
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data_dir() == tmp_path / "home" / ".local" / "share" / "tpmtop"
