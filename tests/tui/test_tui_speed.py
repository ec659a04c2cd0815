"""What keeps keys quick under load (issue 24 item 8; the timings are benchmarks/ui_load.py's,
not asserted here): the help is built once, the tables' percentiles come from a worker, a key
holds the workload until its screen is drawn. Each test checks the behaviour the user sees stays
right. Real swtpm, nothing mocked."""

from __future__ import annotations

from textual.color import Color
from textual.css.stylesheet import Stylesheet
from textual.widgets import DataTable

from tests.helpers.frames import FrameTap
from tests.helpers.processes import wait_until
from tests.helpers.tui import SIZE, app_for, main_screen, theme_applied, until
from tpmtop.sources.gate import UiHold
from tpmtop.tui import messages as m
from tpmtop.tui.screens.help import HelpScreen


def described(rules) -> list[tuple]:
    return [(tuple(r.selector_set), sorted((k, repr(v)) for k, v in r.styles.get_rules().items()), r.is_default_rules,
             r.tie_breaker) for r in rules]


def fresh_rules(app) -> list[tuple]:
    """The rules Textual itself parses from the app's sources under the current theme."""
    ss = Stylesheet(variables=app.get_css_variables())
    for read_from, (css, is_default, tie_breaker, scope) in app.stylesheet.source.items():
        ss.add_source(css, read_from=read_from, is_default_css=is_default, tie_breaker=tie_breaker, scope=scope)
    ss.parse()
    return described(ss.rules)


async def test_t_applies_each_theme_as_textual_parses_it(live, tmp_path):
    src = live(start_running=True, rate=0, mode="none")
    app = app_for(src, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        names = list(app.tpmtop_themes)
        await until(pilot, lambda: main_screen(app).query_one("#latency-table", DataTable).row_count > 0,
                    what="latency rows")
        for _ in range(2):
            for _ in names:
                before = app.theme
                await pilot.press("t")
                await until(pilot, lambda b=before: app.theme != b and theme_applied(app), what="the theme applied")
                assert described(app.stylesheet.rules) == fresh_rules(app)
                # What the user sees: the tables take the theme's surface colour.
                table = main_screen(app).query_one("#latency-table", DataTable)
                assert table.styles.background == Color.parse(app.get_css_variables()["surface"])
        assert app.theme == names[0]


async def test_help_is_built_once_and_opens_at_the_top_each_time(live, tmp_path):
    src = live(start_running=True, rate=0, mode="none")
    app = app_for(src, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        first = app.screen
        assert "Keys" in str(first.query_one("#help-text").render())
        box = first.query_one("#help-box")
        box.scroll_end(animate=False)
        await until(pilot, lambda: box.scroll_y > 0, what="scrolled")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is main_screen(app), what="back")
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help again")
        assert app.screen is first
        await until(pilot, lambda: box.scroll_y == 0, what="back at the top")


async def test_tables_follow_a_mode_change_from_the_stats_worker(live, tmp_path):
    """The percentiles are computed off the UI thread; a result for the run before a key is
    dropped, so after m the Latency table shows the new mode's commands."""
    src = live(start_running=True, rate=0, mode="none")
    seen: list = []
    app = app_for(src, tmp_path)
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        await until(pilot, lambda: any(isinstance(x, m.StatsReady) for x in seen), what="stats from the worker")
        table = main_screen(app).query_one("#latency-table", DataTable)

        def names() -> str:
            return " ".join(str(table.get_row_at(i)) for i in range(table.row_count))

        await until(pilot, lambda: "PCR_Extend" in names(), what="none's rows")
        await pilot.press("m")  # none -> per-command: sessions are started and flushed
        assert src.mode == "per-command"
        await until(pilot, lambda: "StartAuthSession" in names(), what="per-command's rows")


async def test_a_key_holds_the_workload_until_its_screen_is_drawn(live, tmp_path, monkeypatch):
    """The workload shares the process and its GIL with the dashboard: while a key is handled
    its thread waits between operations (tpmtop.sources.gate), and runs again once the key's
    screen is drawn. The hold's cap is raised here so that only the release can end it."""
    import threading

    import tpmtop.sources.gate as lw

    monkeypatch.setattr(lw, "UI_HOLD_MAX_S", {UiHold.KEY: 60.0, UiHold.REFRESH: 60.0})
    src = live(start_running=True, rate=0, mode="none")
    waiting = threading.Event()

    class Watched(threading.Event):
        def wait(self, timeout=None):
            waiting.set()
            return super().wait(timeout)

    src.gate.idle = Watched()
    src.gate.idle.set()
    release = src.gate.release
    app = app_for(src, tmp_path)
    # Not headless: Textual renders each frame and hands it to the driver, which keeps it.
    frames = FrameTap()
    app.driver_class = frames.driver

    def ops() -> int:
        return sum(a.ops for a in src.accounts().values())

    async with app.run_test(size=SIZE, headless=False) as pilot:
        await until(pilot, lambda: ops() > 20, what="the workload running")
        # Held by hand: the loop stops between operations and stays stopped.
        src.gate.hold()
        # `waiting` alone is not enough: a refresh's hold may have set it before this one, with
        # the workload since gone on. Not busy under a hold in force means no operation runs and
        # none can start (an operation sets busy, then looks at the holds).
        await until(pilot, lambda: waiting.is_set() and not src.gate.busy, what="the workload waiting")
        held = ops()
        await pilot.pause(0.3)
        assert ops() == held
        src.gate.release()
        await until(pilot, lambda: ops() > held, what="the workload running again")
        # A key: held when it arrives, released after the screen that draws it.
        calls: list[str] = []
        hold = src.gate.hold
        monkeypatch.setattr(src.gate, "hold", lambda why=UiHold.KEY: (calls.append(f"hold {why}"), hold(why)))
        monkeypatch.setattr(src.gate, "release",
                            lambda why=UiHold.KEY: (calls.append(f"release {why}"), release(why)))
        frozen = screen_frozen(app)
        await pilot.press("s")
        def key_calls() -> list[str]:  # the refreshes hold and release the workload too
            return [c for c in calls if c.endswith(UiHold.KEY)]

        await until(pilot, lambda: key_calls() == ["hold key", "release key"],
                    what=f"the key's hold and release: {calls}")
        assert screen_frozen(app) != frozen and UiHold.KEY not in src.gate.holds
        after = ops()
        await until(pilot, lambda: ops() > after, what="the workload running after the key")
        # t's restyle runs after the key's handler: the release waits for the frame that draws it
        # (the theme each frame that left for the terminal was drawn in).
        drawn: list[str] = []
        frames.on_frame = lambda _data: drawn.append(app.theme)
        before = app.theme
        at_release: list[bool] = []
        def theme_drawn(why: UiHold = UiHold.KEY) -> None:
            if why is UiHold.KEY:
                at_release.append(any(t != before for t in drawn))
            release(why)

        monkeypatch.setattr(src.gate, "release", theme_drawn)
        await pilot.press("t")
        await until(pilot, lambda: at_release, what="t's release")
        assert at_release[0], "the workload was released before t's new theme was drawn"
        # `/` mounts a filter line whose input composes and takes the focus in later messages;
        # the frames drawn before that do not show the key's effect, and do not release it.
        from tpmtop.tui.screens.filter import FilterInput

        shown: list[bool] = []
        frames.on_frame = lambda _data: shown.append(isinstance(app.focused, FilterInput) and app.focused.is_mounted)
        at_release.clear()
        def filter_drawn(why: UiHold = UiHold.KEY) -> None:
            if why is UiHold.KEY:
                at_release.append(any(shown))
            release(why)

        monkeypatch.setattr(src.gate, "release", filter_drawn)
        await pilot.press("slash")
        await until(pilot, lambda: at_release, what="/'s release")
        assert at_release[0], "the workload was released before the filter line was drawn with its focus"


def screen_frozen(app) -> bool:
    from tpmtop.tui.widgets.stream import StreamPanel

    return main_screen(app).query_one(StreamPanel).frozen


async def test_a_refresh_due_while_a_key_is_drawn_gives_way_to_it_once(live, tmp_path, monkeypatch):
    """A key is in flight from its arrival until its screen is drawn (the workload's hold and
    release mark both ends). A refresh tick due meanwhile (5 ms of the UI thread, up to 20 under
    load, that the key waited for) waits for the next tick; only once, so that a key held down
    does not stop the refreshes. A worker's result that comes meanwhile is drawn by that tick."""
    src = live(start_running=True, rate=0, mode="none")
    app = app_for(src, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        main = main_screen(app)
        in_flight: list[tuple[str, bool]] = []
        hold, release = src.gate.hold, src.gate.release

        def note(what: str, why: UiHold) -> None:
            if why is UiHold.KEY:  # the refreshes hold and release the workload too
                in_flight.append((what, app.key_in_flight()))

        monkeypatch.setattr(src.gate, "hold", lambda why=UiHold.KEY: (note("hold", why), hold(why)))
        monkeypatch.setattr(src.gate, "release", lambda why=UiHold.KEY: (note("release", why), release(why)))
        await pilot.press("s")
        await until(pilot, lambda: len(in_flight) == 2, what=f"the key's hold and release: {in_flight}")
        assert in_flight == [("hold", True), ("release", False)]
        assert not app.key_in_flight()

        # Paused: a tick then draws at once (one due during an operation waits for its end:
        # test_a_refresh_draws_between_operations).
        src.set_running(False)
        await until(pilot, lambda: not src.gate.busy, what="the workload paused")
        # Only this test's ticks from here: the interval's own tick, due under load while the
        # workload still ran, can still be waiting for its gap, and a tick then draws nothing
        main.clock.timer.stop()
        await until(pilot, lambda: not main.clock.waiting, what="no refresh waiting for the workload")
        refreshed: list[int] = []
        dash_tick = main.dash.tick
        monkeypatch.setattr(main.dash, "tick", lambda *a, **kw: (refreshed.append(1), dash_tick(*a, **kw))[1])
        monkeypatch.setattr(app, "key_in_flight", lambda: True)
        main.tick()
        assert refreshed == []  # gave way to the key
        main.tick()
        assert refreshed == [1]  # not twice in a row
        monkeypatch.setattr(app, "key_in_flight", lambda: False)
        main.tick()
        main.tick()
        assert refreshed == [1, 1, 1]

        # A worker's result that comes during a key is drawn by the next tick instead.
        shown: list[object] = []
        show = main.show
        monkeypatch.setattr(main, "show", lambda frame: (shown.append(frame), show(frame))[1])
        view = main.dash.stats(main.query_one("#modes").content_size.width)
        assert view is not None
        monkeypatch.setattr(app, "key_in_flight", lambda: True)
        main.on_stats_ready(m.StatsReady(view, main.dash.generation))
        assert shown == []
        monkeypatch.setattr(app, "key_in_flight", lambda: False)
        main.tick()
        assert any(getattr(f, "stats", None) is view for f in shown)


def test_the_workload_waits_for_every_hold_and_no_longer_than_its_time(live, monkeypatch):
    """A key's hold and a refresh's are released each on its own: the workload runs again once
    both are, and a hold the dashboard never releases ends at its time. Real swtpm, the live
    source's own loop on its own thread."""
    import threading
    import time

    import tpmtop.sources.gate as lw

    monkeypatch.setattr(lw, "UI_HOLD_MAX_S", {UiHold.KEY: 60.0, UiHold.REFRESH: 60.0})
    src = live(start_running=True, rate=0, mode="none")
    stop = threading.Event()
    loop = threading.Thread(target=src.workload_loop, args=(stop.is_set,), daemon=True)

    def ops() -> int:
        return sum(a.ops for a in src.accounts().values())

    loop.start()
    try:
        wait_until(lambda: ops() > 20, "the workload running")
        src.gate.hold(UiHold.KEY)
        src.gate.hold(UiHold.REFRESH)
        wait_until(lambda: not src.gate.busy, "the burst under way to end")
        held = ops()
        time.sleep(0.3)
        assert ops() == held, "an operation started while held"
        src.gate.release(UiHold.KEY)
        time.sleep(0.3)
        assert ops() == held, "an operation started while the refresh still held the workload"
        src.gate.release(UiHold.REFRESH)
        wait_until(lambda: ops() > held, "the workload running again")
        # Never released: it runs again once the hold's time is up.
        monkeypatch.setattr(lw, "UI_HOLD_MAX_S", {UiHold.KEY: 60.0, UiHold.REFRESH: 0.2})
        src.gate.hold(UiHold.REFRESH)
        wait_until(lambda: not src.gate.busy, "the burst under way to end")
        held = ops()
        wait_until(lambda: ops() > held + 50, "the workload running after the hold's time")
    finally:
        stop.set()
        loop.join(30)


async def test_a_refresh_draws_between_operations(live, tmp_path, monkeypatch):
    """The dashboard's refresh and the workload share the process and its GIL: an operation
    under way while a frame was drawn waited for the GIL after each round trip, and the Latency
    panel showed the refresh's milliseconds as the TPM's tail. A refresh waits for the end of
    the operation under way and draws while the workload waits: no workload command is on the
    wire between a refresh's start and its frame. Unpaced, so that every refresh falls due in
    the middle of a burst; the waits' caps are raised so that only the releases end them."""
    import time

    import tpmtop.sources.gate as lw
    import tpmtop.tui.screens.refresh as refresh_module
    from tpmtop.tpm.exchange import Origin

    monkeypatch.setattr(lw, "UI_HOLD_MAX_S", {UiHold.KEY: 60.0, UiHold.REFRESH: 60.0})
    monkeypatch.setattr(refresh_module, "QUIET_WAIT_MAX_S", 60.0)
    src = live(start_running=True, rate=0, mode="per-command")
    app = app_for(src, tmp_path)
    windows: list[list[int]] = []  # [start, end] of each refresh, perf_counter_ns
    async with app.run_test(size=SIZE) as pilot:
        main = main_screen(app)
        await until(pilot, lambda: sum(a.ops for a in src.accounts().values()) > 20, what="the workload running")
        draw, release = main.clock.draw, src.gate.release

        def drawing() -> None:
            windows.append([time.perf_counter_ns(), 0])
            draw()

        def released(why: UiHold = UiHold.KEY) -> None:
            if why is UiHold.REFRESH and windows and not windows[-1][1]:
                windows[-1][1] = time.perf_counter_ns()
            release(why)

        monkeypatch.setattr(main.clock, "draw", drawing)
        monkeypatch.setattr(src.gate, "release", released)
        first = src.recorder.events()[-1].seq
        await until(pilot, lambda: sum(1 for w in windows if w[1]) >= 10, what="ten refreshes drawn")
        done = [w for w in windows if w[1]]
        events = [e for e in src.recorder.events_since(first) if e.origin == Origin.WORKLOAD]
    spans: dict[int, list[int]] = {}
    for e in events:
        if e.op_seq is not None:
            s = spans.setdefault(e.op_seq, [e.t_ns, e.t_ns + e.wire_ns])
            s[0], s[1] = min(s[0], e.t_ns), max(s[1], e.t_ns + e.wire_ns)
    between = [s for s in spans.values() if done[0][0] < s[0] < done[-1][1]]
    assert len(between) > 20, "the workload hardly ran between the refreshes"
    overlapping = [(s, w) for s in spans.values() for w in done if s[0] < w[1] and w[0] < s[1]]
    assert not overlapping, f"{len(overlapping)} operations on the wire during a refresh: {overlapping[:3]}"
