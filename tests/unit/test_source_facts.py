"""Issue 54: a source hands up facts (states, names, numbers), the view-model writes the words
(tpmtop.viewmodel.labels, tpmtop.viewmodel.rows.inspect). Two checks on what the view-model reads
from a source — the header (``Feed.header() -> HeaderInfo``), the selected run's timings
(``Runs.timings() -> TimingsView``) and a handle's inspection (``TpmControl.inspect() ->
HandleFacts``), and every struct reachable from their fields:

- no field of them is a label: each is a number, a flag, an enum, a nested struct, or a string
  the source is *given* (a name the TPM, a capture or the OS says, or a reason handed to it),
  each such field named below with where its text comes from;
- ``tpmtop/sources/`` builds none of their values from words: no f-string, ``str.join``,
  ``str.format``, ``%`` or ``+`` on a string goes into one of them (directly, or through a
  local variable of the same function).

Before this change both failed: ``TimingsView.subtitle``/``run_label``/``modes_note``/
``modes_lines`` and ``HeaderInfo.identity``/``rate``/``extra``/``tooltip`` were labels made in
the sources (``f"run {label}/{op} · {n} ops"``, ``" · ".join(bits)``, …), and the inspector's
rows were (field, value) text (``f"{s:,.1f} s ago"``).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import sys
import types
import typing
from pathlib import Path

from tpmtop.sources.inspect import HandleFacts
from tpmtop.sources.protocol import HeaderInfo
from tpmtop.sources.timings import TimingsView

SOURCES = Path(__file__).resolve().parents[2] / "tpmtop" / "sources"

# (struct, field) -> where the string comes from: never text tpmtop writes for the screen.
GIVEN = {
    ("HeaderInfo", "tcti"): "the TCTI or trace the source reads (its configuration string)",
    ("HeaderInfo", "engine"): "a session engine's name (tpmtop.sessions.modes.Engine)",
    ("HeaderInfo", "mode"): "a session mode's name (Mode), or the capture's",
    ("HeaderInfo", "op"): "an operation's name (Op), or the capture's",
    ("HeaderInfo", "simulated_reason"): "why a simulator answers, as tpmtop.connect said it",
    ("HeaderInfo", "profile"): "a latency profile's name",
    ("HeaderInfo", "marker"): "a reason handed to the source (--passive: the CLI's note of why only sysfs)",
    ("TpmName", "manufacturer"): "GetCapability's or the capture's string",
    ("TpmName", "vendor"): "GetCapability's or the capture's string",
    ("TpmName", "firmware"): "GetCapability's or the capture's string",
    ("LiveFacts", "last_error"): "the error the TPM link met (the OS's or TPM's words)",
    ("LiveFacts", "profile_note"): "what a --profile says of itself (tpmtop.profiles)",
    ("CaptureFacts", "file"): "the capture's file name",
    ("CaptureFacts", "created"): "the capture's timestamp",
    ("CaptureFacts", "hostname"): "the capture's host",
    ("CaptureFacts", "kernel"): "the capture's kernel release",
    ("KernelFacts", "error"): "why the kernel tap stopped (tpmtop.kernel)",
    ("PassiveFacts", "tpm_dir"): "sysfs's path",
    ("PassiveFacts", "note"): "why only sysfs, as the CLI said it",
    ("TimingsView", "engine"): "a session engine's name",
    ("TimingsView", "mode"): "a session mode's name",
    ("TimingsView", "op"): "an operation's name",
    ("KernelSessions", "mode"): "a session mode's name (tpmtop.kernel.ops)",
    ("KernelSessions", "why"): "tpmtop.kernel.ops's reason for it",
    ("KernelSessions", "note"): "the trace file's kind (tpmtop.kernel.tap)",
    ("RunView", "engine"): "a session engine's name",
    ("RunView", "mode"): "a session mode's name",
    ("RunView", "op"): "an operation's name",
    ("CommandTiming", "path"): "the kernel path a command came by (tpmtop.kernel)",
    ("HandleFacts", "kind"): "the handles table's kind (tpmtop.tpm.handles.HandleKind's value)",
    ("HandleFacts", "created_by"): "the proxied program that created it, as the caller names it",
    ("HandleFacts", "read_public_error"): "the TPM's refusal (tpmtop.errors.TpmError)",
    ("PublicFacts", "type"): "a TPM_ALG name (tpm2-pytss)",
    ("PublicFacts", "name_alg"): "a TPM_ALG name (tpm2-pytss)",
    ("PublicFacts", "attributes"): "TPMA_OBJECT's bit names (tpm2-pytss)",
    ("PublicFacts", "ecc_curve"): "a TPM_ECC name (tpm2-pytss)",
    ("SessionFacts", "last_command"): "a TPM2_CC name",
}
PLAIN = (int, float, bool, bytes, type(None), typing.Any)


def _hints(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))


def _parts(tp: object) -> list[object]:
    """A type's alternatives and element types (``X | None``, ``list[X]``, ``dict[K, V]``)."""
    origin = typing.get_origin(tp)
    if origin is dict:  # a dict's keys are names to look up by (a percentile, a command): its values count
        return _parts(typing.get_args(tp)[1])
    if origin in (typing.Union, types.UnionType) or origin in (list, tuple, set, frozenset):
        return [p for a in typing.get_args(tp) for p in _parts(a) if p is not Ellipsis]
    if origin is not None:  # Callable[..., list[X]]: a lazy read of numbers (histogram buckets)
        return [p for a in typing.get_args(tp) if not isinstance(a, list) and a is not Ellipsis for p in _parts(a)]
    return [tp]


def structs() -> dict[str, type]:
    """HeaderInfo, TimingsView, HandleFacts and every dataclass their fields reach."""
    seen: dict[str, type] = {}
    todo: list[type] = [HeaderInfo, TimingsView, HandleFacts]
    while todo:
        cls = todo.pop()
        if cls.__name__ in seen:
            continue
        seen[cls.__name__] = cls
        for tp in _hints(cls).values():
            todo += [p for p in _parts(tp) if isinstance(p, type) and dataclasses.is_dataclass(p)]
    return seen


def test_the_facts_a_source_hands_up_hold_no_label():
    labels = []
    for name, cls in structs().items():
        for f in dataclasses.fields(cls):
            for p in _parts(_hints(cls)[f.name]):
                ok = (p in PLAIN or (isinstance(p, type) and (issubclass(p, enum.Enum) or dataclasses.is_dataclass(p)))
                      or (p is str and (name, f.name) in GIVEN))
                if not ok:
                    labels.append(f"{name}.{f.name}: {p}")
    assert labels == []


def test_every_given_string_is_a_field_still():
    """The list above names fields that exist (a renamed one must leave it, not linger)."""
    have = {(n, f.name) for n, cls in structs().items() for f in dataclasses.fields(cls)}
    assert set(GIVEN) <= have


def _wording(node: ast.AST) -> bool:
    """An expression that writes text: an f-string, a join, a format, ``%`` or ``+`` on a string."""
    for n in ast.walk(node):
        if isinstance(n, ast.JoinedStr):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("join", "format") \
                and isinstance(n.func.value, ast.Constant) and isinstance(n.func.value.value, str):
            return True
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Mod)) and any(
                isinstance(s, ast.Constant) and isinstance(s.value, str) for s in (n.left, n.right)):
            return True
    return False


def built_from_words() -> list[tuple[str, int, str]]:
    names = set(structs())
    found = []
    for path in sorted(SOURCES.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            assigned: dict[str, list[ast.AST]] = {}
            for n in ast.walk(fn):
                if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    for t in targets:
                        for leaf in ast.walk(t):
                            if isinstance(leaf, ast.Name):
                                assigned.setdefault(leaf.id, []).append(n.value)
            for call in [n for n in ast.walk(fn) if isinstance(n, ast.Call)]:
                callee = call.func.id if isinstance(call.func, ast.Name) else \
                    call.func.attr if isinstance(call.func, ast.Attribute) else ""
                if callee not in names and callee != "replace":  # dataclasses.replace(facts, field=…) too
                    continue
                args = [*call.args, *(k.value for k in call.keywords)]
                values = args + [v for a in args for n in ast.walk(a) if isinstance(n, ast.Name)
                                 for v in assigned.get(n.id, [])]
                if any(_wording(v) for v in values):
                    found.append((path.name, call.lineno, callee))
    return found


def test_the_sources_build_no_words_into_them():
    assert built_from_words() == []


def test_the_check_sees_words_built_into_a_struct(tmp_path, monkeypatch):
    """The AST check catches the old forms: a direct f-string, a join, and one through a local."""
    old = '''
def header(self):
    who = f"{a} {b} fw {c}"
    return HeaderInfo(state=s, identity=who, extra=" · ".join(bits))
def timings(self):
    return TimingsView(run, subtitle="run " + label)
def inspect(self):
    return replace(facts, ago=f"{s:,.1f} s ago")
'''
    (tmp_path / "old.py").write_text(old)
    monkeypatch.setattr(sys.modules[__name__], "SOURCES", tmp_path)
    assert built_from_words() == [("old.py", 4, "HeaderInfo"), ("old.py", 6, "TimingsView"), ("old.py", 8, "replace")]
