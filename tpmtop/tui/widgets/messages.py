"""The dashboard's messages: one line of their own above the footer, and every message of the
sitting a key away (``l``). Toasts covered numbers — Handles and Latency's first rows, the p50
column in replay, three of them the whole left column, a ``T`` toast the Boot report — so
none is shown: the app's ``notify`` (``tpmtop.tui.app.TpmtopApp.notify``) logs each message
with its severity and time-out and draws it here instead."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.css.query import NoMatches
from textual.markup import MarkupError
from textual.screen import ModalScreen
from textual.widgets import Static

LOG_KEPT = 500  # messages the log screen keeps (oldest dropped)
MARKS = {"error": ("✕", "$error"), "warning": ("!", "$warning"), "information": ("·", "$primary")}


@dataclass(frozen=True)
class LoggedMessage:
    text: str
    title: str = ""
    severity: str = "information"
    markup: bool = True
    t: float = field(default_factory=time.time)
    fresh_until: float = 0.0  # time.monotonic() when it dims (its time-out)

    def content(self, *, dim: bool = False, clock: bool = False) -> Content:
        """One line: a severity mark, the title, the text (newlines folded: one message, one line)."""
        text = " · ".join(part.strip() for part in self.text.splitlines() if part.strip())
        body = Content(text)
        if self.markup:
            try:
                body = Content.from_markup(text)
            except MarkupError:  # a message carrying someone else's brackets: shown as it is
                pass
        mark, colour = MARKS.get(self.severity, MARKS["information"])
        style = "dim" if dim else f"b {colour}"
        head = Content.from_markup(f"[{style}]$mark $title[/] " if self.title else f"[{style}]$mark[/] ",
                                   mark=mark, title=self.title)
        when = Content.from_markup("[dim]$t[/] ", t=time.strftime("%H:%M:%S", time.localtime(self.t))) if clock \
            else Content("")
        line = when + head + body
        return line.stylize("dim") if dim else line


class MessageLog:
    """Every message of the sitting, newest last (bounded)."""

    def __init__(self) -> None:
        self.items: deque[LoggedMessage] = deque(maxlen=LOG_KEPT)

    def add(self, msg: LoggedMessage) -> None:
        self.items.append(msg)

    @property
    def latest(self) -> LoggedMessage | None:
        return self.items[-1] if self.items else None


class MessageLine(Horizontal):
    """The latest message, in its severity's colour while it is fresh (its notification's
    time-out), dimmed after; never over a number. The hint on the right says where the rest are."""

    def compose(self) -> ComposeResult:
        yield Static("", id="message-text")
        yield Static("", id="message-hint")

    def on_mount(self) -> None:
        refresh = getattr(self.app, "show_messages", None)
        if refresh is not None:
            self.call_after_refresh(refresh)  # what was said before this screen existed

    def show(self, latest: LoggedMessage | None, fresh: bool, count: int) -> None:
        try:
            text = self.query_one("#message-text", Static)
            hint = self.query_one("#message-hint", Static)
        except NoMatches:  # not composed yet: on_mount asks again
            return
        text.update(latest.content(dim=not fresh) if latest is not None else "", layout=False)
        hint.update(Content.from_markup("[dim]l messages ($n)[/]", n=str(count)) if count else "", layout=False)


class MessageLogScreen(ModalScreen[None]):
    """``l``: every message of this sitting, newest at the bottom."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,l", "app.pop_screen", "Close", id="messages-close",
                        tooltip="Back to the dashboard")]

    def __init__(self, messages: list[LoggedMessage]) -> None:
        super().__init__()
        self.messages = messages

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="messages-box"):
            yield Static(Content.from_markup("[b]Messages[/] (newest last) · Esc, q or l closes"))
            if not self.messages:
                yield Static(Content.from_markup("[dim]no messages yet[/]"))
            for msg in self.messages:
                yield Static(msg.content(clock=True), classes="logged-message")

    def on_mount(self) -> None:
        self.query_one("#messages-box").scroll_end(animate=False)


def open_log(app: App[Any]) -> None:
    """``l``, from any screen that shows a message line."""
    log = getattr(app, "message_log", None)
    app.push_screen(MessageLogScreen(list(log.items) if log is not None else []))
