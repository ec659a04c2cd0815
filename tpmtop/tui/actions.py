"""Every operator action, once: key, binding id, footer label, palette title, help text.

The footer bindings, the command palette and the ``?`` help screen are all built from
:data:`ACTIONS`, so they cannot disagree. Palette titles follow "category: Verb object".
No Textual here (the table is data; the screen turns it into ``Binding``s).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpmtop.sessions.modes import ENGINES, MODES, OPS


@dataclass(frozen=True)
class Action:
    id: str  # kebab-case binding id: users remap keys by it (App.set_keymap)
    key: str
    action: str  # Textual action string on the main screen
    label: str  # footer
    title: str  # command palette: "category: Verb object"
    help: str
    show: bool = True  # in the footer
    changes_tpm: bool = False  # refused with --read-only and in replay/passive
    essential: bool = False  # in the footer at every width (others only from 120 columns)


ACTIONS: tuple[Action, ...] = (
    Action("toggle-workload", "space", "toggle_workload", "Pause", "workload: Pause or resume",
           "Pause or resume the workload (it changes PCR 16 on a real TPM, so it starts paused there)",
           changes_tpm=True, essential=True),
    Action("next-mode", "m", "next_mode", "Mode", "session: Switch to next mode",
           f"Cycle the HMAC session mode: {' → '.join(MODES)} (in replay: show that mode's run)", essential=True),
    Action("next-engine", "e", "next_engine", "Engine", "engine: Switch to next engine",
           f"Switch the crypto engine: {' ↔ '.join(ENGINES)}"),
    Action("next-op", "o", "next_op", "Op", "operation: Switch to next operation",
           f"Cycle the operation: {' → '.join(OPS)}"),
    Action("rate-up", "plus", "rate(1)", "Faster", "workload: Increase rate",
           "Raise the workload's target rate (last step: as fast as the TPM allows)", show=False),
    Action("rate-down", "minus", "rate(-1)", "Slower", "workload: Decrease rate",
           "Lower the workload's target rate", show=False),
    Action("flush-handle", "f", "flush_selected", "Flush", "handle: Flush selected",
           "Flush the handle selected in the Handles panel (asks first if tpmtop did not create it)",
           changes_tpm=True, essential=True),
    Action("inspect-handle", "i", "inspect_selected", "Inspect", "handle: Inspect selected",
           "What the TPM says about the selected handle (ReadPublic: type, name, attributes; a session's "
           "salt and bind as seen on the wire). Enter on a handle does the same; read-only", show=False),
    Action("flush-ours", "F", "flush_ours", "Flush ours", "handle: Flush all of tpmtop's",
           "Flush every handle tpmtop created (never a proxied client's or anyone else's)",
           show=False, changes_tpm=True),
    Action("reset-stats", "r", "reset_stats", "Reset", "stats: Reset statistics",
           "Forget the latency statistics and the command stream (the TPM is not touched)"),
    Action("export-capture", "x", "export", "Export", "capture: Export capture",
           "Write a capture (the `tpmtop bench --json` contract) to a new timestamped file in "
           "$XDG_DATA_HOME/tpmtop (~/.local/share/tpmtop), atomically; the full path shows at once", essential=True),
    Action("toggle-stream", "s", "toggle_stream", "Stream", "stream: Pause or resume",
           "Freeze or follow the command stream (recording goes on)", show=False),
    Action("filter-stream", "slash", "filter_stream", "Filter", "stream: Filter by command",
           "Show only commands whose name or origin contains the text; `errors`: failed commands only (empty: all). "
           "On a focused table (Handles, Latency): only rows containing the text. The filter line opens in that "
           "panel: Enter applies, Esc leaves it as it was, Ctrl-U clears it", show=False),
    Action("boot-projection", "p", "show_projection", "Projection", "boot: Show cost projection",
           "What N kernel PCR extends cost in each mode, priced with this sitting's per-command p50s "
           "(N: this machine's IMA count, or type one), with the arithmetic", show=False),
    Action("boot-report", "b", "show_boot", "Boot", "boot: Show report",
           "The `tpmtop boot` report: is the TPM what slows this machine's boot? (reads files, "
           "sends no TPM command)"),
    Action("sort-table", "greater_than_sign", "sort_table(1)", "Sort", "table: Sort by next column",
           "Sort the focused table (Latency, Handles) by its next column, biggest first; after the last "
           "column, back to its own order (the operation's rows stay on top). The header marks it ▼",
           show=False),
    Action("sort-table-back", "less_than_sign", "sort_table(-1)", "Sort back", "table: Sort by previous column",
           "Sort the focused table by its previous column (> the other way)", show=False),
    Action("refresh-faster", "right_square_bracket", "refresh_rate(-1)", "Faster refresh",
           "screen: Refresh more often",
           "Redraw the screen more often (0.1 s at most; the header shows the interval). The TPM is "
           "polled as before", show=False),
    Action("refresh-slower", "left_square_bracket", "refresh_rate(1)", "Slower refresh", "screen: Refresh less often",
           "Redraw the screen less often (up to every 5 s): less of the dashboard's own CPU", show=False),
    Action("show-tcti", "T", "show_tcti", "TCTI", "tpm: Show TCTI for tpm2-tools",
           "The TCTI string that points tpm2-tools at the TPM this dashboard watches (copied to the "
           "clipboard where the terminal allows)", show=False),
    Action("next-theme", "t", "next_theme", "Theme", "theme: Switch to next theme",
           "Cycle the colour theme; the choice is remembered"),
    Action("message-log", "l", "show_messages", "Messages", "app: Show messages",
           "Every message of this sitting, newest last (the line above the footer shows the latest)",
           show=False),
    Action("help", "question_mark,f1", "help", "Help", "help: Show keys",
           "This list", essential=True),
    Action("quit", "q,f10", "quit", "Quit", "app: Quit tpmtop",
           "Quit (stops the workload, flushes tpmtop's handles, stops a private swtpm); F10 too, as in htop",
           essential=True),
)

OPTIONAL_IN_FOOTER = {a.action for a in ACTIONS if a.show and not a.essential}


def palette_entries() -> list[tuple[str, str, str]]:
    """(title, help, action string) for the command palette, including one entry per target
    so that "session: Switch to reuse" can be typed directly."""
    out = [(a.title, a.help, a.action) for a in ACTIONS]
    out += [(f"session: Switch to {m}", f"HMAC session mode {m}", f"set_mode('{m}')") for m in MODES]
    out += [(f"engine: Switch to {e}", f"crypto engine {e}", f"set_engine('{e}')") for e in ENGINES]
    out += [(f"operation: Run {o}", f"operation {o}", f"set_op('{o}')") for o in OPS]
    from tpmtop.tui.panels import PANELS  # the widgets' table (this module stays plain data)

    out += [(f"panel: Show {p.title.lower()}", f"key {p.key}", f"show_panel('{p.id}')") for p in PANELS]
    return out
