"""``b``: the ``tpmtop boot`` report (issue 6), on its own screen.

The report is built by :mod:`tpmtop.boot.report` — the same code and the same text as the CLI.
Building it reads many files and may run ``dmesg`` and ``systemd-analyze`` (up to 10 s each
when something hangs), so it runs in a thread worker; the UI only shows the result. It sends
no TPM command (on Linux 6.12+ any user-space command ends the kernel's kept HMAC session), and
it is given no identity either: the text then matches plain ``tpmtop boot``, which says so, and
the dashboard's header already names the TPM.
"""

from __future__ import annotations

import re
import textwrap
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import ScrollableContainer
from textual.content import Content
from textual.markup import escape
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from tpmtop.tui.widgets.messages import MessageLine

_DASHES = re.compile(r"\s*-+(?:  +-+)*\s*")


def fit_report(text: str, width: int) -> str:
    """The CLI's report for a screen ``width`` columns wide: a table row too long for it wraps
    its last column (sources, messages) under that column instead of running off the screen —
    the source column was cut at 120 columns. Other long lines are left to the Static's wrap."""
    if width <= 0:
        return text
    out: list[str] = []
    last_col: int | None = None  # where the current table's last column starts
    for line in text.split("\n"):
        if line.strip() and _DASHES.fullmatch(line):
            last_col = len(line.rstrip()) - len(line.rstrip().split()[-1])
            if len(line.rstrip()) > width:
                beside = last_col <= width - 16
                if out and len(out[-1]) > width and not beside:  # the header names the column below
                    head = out.pop()
                    out += [head[:last_col].rstrip(), "      " + head[last_col:].strip()]
                line = line[:width] if beside else line[:last_col]
            out.append(line.rstrip())  # the rule under the header: no wider than the screen
            continue
        if not line.strip():
            last_col = None
        if last_col is not None and len(line) > width:
            tail = line[last_col:]
            if last_col <= width - 16:  # under its own column
                parts = textwrap.wrap(tail, width - last_col, break_on_hyphens=False) or [""]
                out.append(line[:last_col] + parts[0])
                out += [" " * last_col + part for part in parts[1:]]
            else:  # no room beside the others: on the lines below, indented
                out.append(line[:last_col].rstrip())
                out += ["      " + part for part in textwrap.wrap(tail, width - 6, break_on_hyphens=False)]
        else:
            out.append(line)
    return "\n".join(out)


class BootScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,b", "app.pop_screen", "Back", id="boot-close", tooltip="Back to the dashboard"),
        Binding("r", "rebuild", "Rebuild", id="boot-rebuild", tooltip="Read the system's files again"),
        Binding("q", "app.quit", "Quit", id="boot-quit", tooltip="Quit tpmtop"),
        Binding("l", "show_messages", "Messages", show=False, id="boot-messages",
                tooltip="Every message of this sitting"),
    ]

    def action_show_messages(self) -> None:
        from tpmtop.tui.widgets.messages import open_log

        open_log(self.app)

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
        self.text = ""  # the report as the CLI prints it; fitted to the screen's width when shown

    def compose(self) -> ComposeResult:
        yield Static(f"[b]Boot report[/] · root {escape(self.root)} · files only, no TPM command sent", id="boot-title")
        yield Static("building the report… (reads files; may run dmesg and systemd-analyze)", id="boot-verdict")
        with ScrollableContainer(id="boot-scroll"):
            # markup=False: the report is plain text with [brackets] from kernel logs in it.
            yield Static("", id="boot-text", markup=False)
        yield MessageLine(id="message-bar")
        yield Footer()

    def on_screen_resume(self) -> None:
        self.app.call_later(getattr(self.app, "show_messages", lambda: None))

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
        except Exception as e:
            self.post_message(self.ReportFailed(f"{type(e).__name__}: {e}"))
        else:
            self.post_message(self.ReportReady(rep.verdict, text))

    def on_boot_screen_report_ready(self, message: ReportReady) -> None:
        self.built = True
        verdict = self.query_one("#boot-verdict", Static)
        verdict.update(Content(message.verdict))
        verdict.set_class(False, "-failed")
        self.text = message.text
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        width = self.query_one("#boot-scroll").size.width - 4  # the text's padding, a scrollbar
        self.query_one("#boot-text", Static).update(fit_report(self.text, width))

    def on_boot_screen_report_failed(self, message: ReportFailed) -> None:
        verdict = self.query_one("#boot-verdict", Static)
        verdict.update(Content(f"the boot report could not be built: {message.error}"))
        verdict.set_class(True, "-failed")
