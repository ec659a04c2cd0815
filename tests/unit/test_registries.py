"""Every closed set is defined once and every registry is complete: a mode has its strategy,
colour, projection formula and schema entry; a panel its key, title and help line; an
exporter and an importer their format. A half-added member fails here, not on a user."""

from __future__ import annotations

import json
from importlib import resources

from tests.helpers.paths import TESTS
from tpmtop.boot import projection as pj
from tpmtop.sessions.engines import ENGINE_FACTORIES
from tpmtop.sessions.modes import MODE_INFO, Engine, Mode
from tpmtop.sessions.workload import STRATEGIES


def _schema() -> dict:
    return json.loads(resources.files("tpmtop").joinpath("schema/capture-1.json").read_text())


def test_every_mode_has_strategy_colour_projection_and_schema_entry():
    from tpmtop.tui.themes import VARIABLE_DEFAULTS

    assert set(MODE_INFO) == set(Mode)
    assert set(STRATEGIES) == set(Mode)
    for mode, info in MODE_INFO.items():
        assert info.tone in VARIABLE_DEFAULTS, f"{mode}: colour {info.tone} is no theme variable"
        for letter in info.once + info.each:
            assert letter in pj.COMPONENTS, f"{mode}: projection names unknown command {letter}"
    proj = pj.project(1000, "test", pj.published_components())
    assert set(proj.modes) == set(Mode)
    assert proj.modes[Mode.REUSE].formula == "(L + S + F) + N × Eh"
    assert _schema()["$defs"]["session_mode"]["enum"] == [m.value for m in Mode]


def test_every_engine_can_be_built():
    assert set(ENGINE_FACTORIES) == set(Engine)


def test_cli_choices_come_from_the_registry():
    from tpmtop.cli import build_parser

    p = build_parser()
    mode = next(a for a in p._actions if "--mode" in a.option_strings)
    assert tuple(mode.choices) == tuple(Mode)


def test_every_panel_has_a_key_a_help_line_and_a_place():
    from tpmtop.tui.actions import ACTIONS, palette_entries
    from tpmtop.tui.panels import PANELS, Group
    from tpmtop.tui.screens.help import help_markup
    from tpmtop.tui.screens.main import MainScreen
    from tpmtop.tui.widgets.panel import Panel

    keys = [p.key for p in PANELS]
    assert len(set(keys)) == len(keys) and not set(keys) & {a.key for a in ACTIONS}
    assert len({p.id for p in PANELS}) == len(PANELS)
    text = help_markup()
    palette = {title for title, _, _ in palette_entries()}
    bindings = {b.id for b in MainScreen.BINDINGS}
    for p in PANELS:
        assert p.title and p.help and isinstance(p.group, Group) and issubclass(p.widget, Panel)
        assert p.help in text, f"{p.id}: no help line"
        assert f"panel: Show {p.title.lower()}" in palette
        assert f"panel-{p.id}" in bindings


def test_every_export_format_is_offered_and_described():
    from tpmtop.cli import build_parser
    from tpmtop.export.registry import EXPORTERS, formats_help

    export = next(a for a in build_parser(eager=True)._subparsers._group_actions[0].choices["export"]._actions
                  if "--format" in a.option_strings)
    assert tuple(export.choices) == tuple(EXPORTERS) and "pcapng" in EXPORTERS
    for e in EXPORTERS.values():
        assert f"  {e.name} " in formats_help() and e.name in e.example
        assert callable(getattr(__import__(e.module, fromlist=[e.function]), e.function))


def test_every_import_format_sniffs_its_own_files(tmp_path):
    import struct

    from tpmtop.importers.registry import IMPORTERS, find_importer

    pcap, pcapng = tmp_path / "a.pcap", tmp_path / "a.pcapng"
    pcap.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))  # a pcap's global header
    pcapng.write_bytes(b"\x0a\x0d\x0d\x0a" + bytes(24))  # a section header block's type
    assert find_importer(pcap) is IMPORTERS["pcap"] and find_importer(pcapng) is IMPORTERS["pcap"]
    capture = TESTS / "tui_fixtures" / "slb9670-extend.json"
    assert find_importer(capture) is None  # a capture is read as one, not imported
    for i in IMPORTERS.values():
        assert callable(getattr(__import__(i.module, fromlist=[i.function]), i.function))
