"""Textual's stylesheet, keeping each theme's parsed rules: ``t`` restyles without re-parsing.

Textual re-parses every CSS source (its widgets' defaults and ours: thousands of tokens) on
each theme change — in a fresh Stylesheet, so nothing parsed under a theme is ever reused —
and clears its parse cache, so the first widget class mounted after a switch (a toast, the
help screen) parses everything once more. Under two busy loops that made ``t`` take 0.6–1.7 s
(benchmarks/ui_load.py). Here the rules are kept per set of theme variables (a theme's
colours), and :meth:`ThemeStylesheet.warm` parses another theme's ahead of time on a worker
thread, so a switch only applies rules already parsed.
"""

from __future__ import annotations

import threading
from typing import Any

from textual.css.stylesheet import Stylesheet

_RuleKey = tuple[str, Any, bool, int, str]  # css, where it was read from, default css, tie-breaker, scope


def _variables_key(variables: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(variables.items()))


class ThemeStylesheet(Stylesheet):
    def __init__(self, *, variables: dict[str, str] | None = None) -> None:
        super().__init__(variables=variables)
        self._by_theme: dict[tuple[tuple[str, str], ...], dict[_RuleKey, list[Any]]] = {}
        self._theme_key = _variables_key(self._variables)
        self._lock = threading.Lock()  # warm() runs on a worker thread

    def set_variables(self, variables: dict[str, str]) -> None:
        super().set_variables(variables)
        self._theme_key = _variables_key(variables)

    def _parse_rules(self, css: str, read_from: Any, is_default_rules: bool = False, tie_breaker: int = 0,
                     scope: str = "") -> list[Any]:
        key: _RuleKey = (css, read_from, is_default_rules, tie_breaker, scope)
        with self._lock:
            rules = self._by_theme.setdefault(self._theme_key, {}).get(key)
        if rules is None:
            rules = super()._parse_rules(css, read_from, is_default_rules, tie_breaker, scope)
            with self._lock:
                self._by_theme[self._theme_key][key] = rules
        return rules

    @classmethod
    def replace_rules(cls, node: Any, rules: Any, animate: bool = False) -> None:
        # Textual sets every rule of every node again on a restyle, each through its property's
        # validation and a refresh; on a theme switch only the colours change, so a rule whose
        # value is unchanged is left alone (half of a restyle's time: benchmarks/ui_load.py, `t`).
        if animate:
            super().replace_rules(node, rules, animate=True)
            return
        base = node.styles.base
        old = base._rules
        get_rule = rules.get
        # Each changed rule asks for a refresh of the node (a colour: of its whole subtree);
        # asked once per node instead, with what the changed rules asked for between them.
        asked = {"layout": False, "children": False, "parent": False, "repaint": False}
        refreshes = 0

        def refresh(*, layout: bool = False, children: bool = False, parent: bool = False,
                    repaint: bool = True) -> None:
            nonlocal refreshes
            refreshes += 1
            asked["layout"] |= layout
            asked["children"] |= children
            asked["parent"] |= parent
            asked["repaint"] |= repaint

        base.refresh = refresh  # shadows Styles.refresh on this one instance while rules are set
        try:
            for key in old.keys() | rules.keys():
                value = get_rule(key)
                if value is not None and old.get(key) == value:
                    continue
                setattr(base, key, value)
        finally:
            del base.refresh
        if refreshes:
            base.refresh(**asked)
        node.notify_style_update()

    def reparse(self) -> None:
        # Textual's reparse builds a fresh Stylesheet so that bad CSS leaves the current rules
        # in place; parse() has the same property (self._rules is set only once all parsed).
        self.parse()

    def warm(self, variables: dict[str, str]) -> None:
        """Parse every current source under ``variables`` (another theme's), for a later switch.
        Safe on a worker thread: it parses into its own Stylesheet and only adds to the cache."""
        key = _variables_key(variables)
        with self._lock:
            have = dict(self._by_theme.get(key, {}))
            sources = list(self.source.items())
        parser = Stylesheet(variables=variables)
        new: dict[_RuleKey, list[Any]] = {}
        for read_from, (css, is_default, tie_breaker, scope) in sources:
            rule_key: _RuleKey = (css, read_from, is_default, tie_breaker, scope)
            if rule_key not in have:
                try:
                    new[rule_key] = parser._parse_rules(css, read_from, is_default, tie_breaker, scope)
                except Exception:  # noqa: BLE001 - the switch itself parses it again and reports
                    continue
        with self._lock:
            self._by_theme.setdefault(key, {}).update(new)
