"""``b``: the ``tpmtop boot`` report (issue 6), on its own screen.

The report is built by :mod:`tpmtop.boot.report` — the same code and the same text as the CLI.
Building it reads many files and may run ``dmesg`` and ``systemd-analyze`` (up to 10 s each
when something hangs), so it runs in a thread worker; the UI only shows the result. It sends
no TPM command (on Linux 6.12+ any user-space command ends the kernel's kept HMAC session), and
it is given no identity either: the text then matches plain ``tpmtop boot``, which says so, and
the dashboard's header already names the TPM.
"""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import ScrollableContainer
from textual.content import Content
from textual.markup import escape
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from tpmtop.tui.widgets.messages import MessageLine


class BootScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,b", "app.pop_screen", "Back", id="boot-close", tooltip="Back to the dashboard"),
        Binding("r", "rebuild", "Rebuild", id="boot-rebuild", tooltip="Read the system's files again"),
        Binding("q", "app.quit", "Quit", id="boot-quit", tooltip="Quit tpmtop"),
    ]

    class ReportReady(Message):
        def __init__(self, verdict: str, text: str) -> None:
            super().__init__()
            self.verdict = verdict
            self.text = text

    class ReportFailed(Message):
        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    def __init__(self, root: str = "/") -> None:
        super().__init__()
        self.root = root
        self.built = False

    def compose(self) -> ComposeResult:
        yield Static(f"[b]Boot report[/] · root {escape(self.root)} · files only, no TPM command sent", id="boot-title")
        yield Static("building the report… (reads files; may run dmesg and systemd-analyze)", id="boot-verdict")
        with ScrollableContainer(id="boot-scroll"):
            # markup=False: the report is plain text with [brackets] from kernel logs in it.
            yield Static("", id="boot-text", markup=False)
        yield MessageLine(id="message-bar")
        yield Footer()

    def on_screen_resume(self) -> None:
        self.app.call_later(getattr(self.app, "_refresh_notifications", lambda: None))

    def on_mount(self) -> None:
        self.query_one("#boot-scroll").focus()  # arrows and page keys scroll the report
        self.build()

    def action_rebuild(self) -> None:
        self.query_one("#boot-verdict", Static).update("building the report…")
        self.build()

    @work(thread=True, exclusive=True, exit_on_error=False, group="boot", description="build the boot report")
    def build(self) -> None:
        from tpmtop.boot.report import build_report, render_text
        from tpmtop.boot.rootfs import RootReader

        try:
            rep = build_report(RootReader(self.root))
            text = render_text(rep)
        except Exception as e:  # noqa: BLE001 - a report that cannot be built must not end the dashboard
            self.post_message(self.ReportFailed(f"{type(e).__name__}: {e}"))
        else:
            self.post_message(self.ReportReady(rep.verdict, text))

    def on_boot_screen_report_ready(self, message: ReportReady) -> None:
        self.built = True
        verdict = self.query_one("#boot-verdict", Static)
        verdict.update(Content(message.verdict))
        verdict.set_class(False, "-failed")
        self.query_one("#boot-text", Static).update(message.text)

    def on_boot_screen_report_failed(self, message: ReportFailed) -> None:
        verdict = self.query_one("#boot-verdict", Static)
        verdict.update(Content(f"the boot report could not be built: {message.error}"))
        verdict.set_class(True, "-failed")
