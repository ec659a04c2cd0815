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
from collections.abc import Iterable
from typing import Any

from textual.css.stylesheet import Stylesheet
from textual.dom import DOMNode

_RuleKey = tuple[str, Any, bool, int, str]  # css, where it was read from, default css, tie-breaker, scope


def _variables_key(variables: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(variables.items()))


# The node (its id) and rules of the last replace_rules call: what Textual's apply gave a node,
# read back by ThemeStylesheet.apply right after (one slot: nothing is kept alive by it).
_last_given: tuple[int, Any] = (0, None)


# The refreshes replace_rules was asked for during one update_nodes pass (None outside one).
_refreshes: list[tuple[Any, dict[str, bool]]] | None = None


def _refresh_once(asked: list[tuple[Any, dict[str, bool]]]) -> None:
    """What Textual's Styles.refresh does for each (node, what it asked), with each node
    refreshed once: a colour change refreshes the node's whole subtree, and on a theme switch
    every node's colours change, so each was refreshed once per ancestor (231 refreshes for the
    dashboard's 40 widgets)."""
    flags: dict[Any, list[bool]] = {}  # node -> [layout, repaint]

    def want(node: Any, layout: bool, repaint: bool) -> None:
        have = flags.get(node)
        if have is None:
            flags[node] = [layout, repaint]
        else:
            have[0] |= layout
            have[1] |= repaint

    subtrees: dict[Any, tuple[bool, bool]] = {}
    for node, a in asked:
        if a["parent"] and node._parent is not None:
            want(node._parent, False, a["repaint"])
        want(node, a["layout"], True)
        if a["children"]:
            subtrees[node] = (a["layout"], a["repaint"])
    for node, (layout, repaint) in subtrees.items():
        up = node._parent
        while up is not None:  # an ancestor's subtree refresh already covers this one's
            covering = subtrees.get(up)
            if covering is not None and covering[0] >= layout and covering[1] >= repaint:
                break
            up = up._parent
        else:
            for child in node.walk_children(with_self=False):
                want(child, layout, repaint)
    for node, (layout, repaint) in flags.items():
        node.refresh(layout=layout, repaint=repaint)


class ThemeStylesheet(Stylesheet):
    def __init__(self, *, variables: dict[str, str] | None = None) -> None:
        super().__init__(variables=variables)
        self._by_theme: dict[tuple[tuple[str, str], ...], dict[_RuleKey, list[Any]]] = {}
        self._theme_key = _variables_key(self._variables)
        self._lock = threading.Lock()  # warm() runs on a worker thread
        self._generations: dict[tuple[Any, ...], int] = {}  # (theme, sources) -> number
        self._generation = -1
        self._paths: dict[int, tuple[Any, ...]] | None = None  # during one update_nodes pass
        self._given: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._components_later = False
        self._used_pseudo: frozenset[str] = frozenset()
        self._pseudo_checks: dict[type, tuple[tuple[str, Any], ...]] = {}

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

    # -- a restyle remembers what each place in the tree was given -------------------------
    # Matching every rule's selectors against each node's path is most of a restyle that is not
    # setting rules (``t``: ~7 of 12 ms for the 40 widgets and their component classes). What a
    # node matches depends only on the rules and on its path: each node's type, id, classes and
    # pseudo-classes, from the App down. So the rules each path was given are kept per set of
    # rules (a theme's), and a switch back to a theme only sets them again.
    _CACHE_MAX = 20_000  # entries; past it the cache starts again

    def parse(self) -> None:
        super().parse()
        key = (self._theme_key, tuple(self.source.items()))
        self._generation = self._generations.setdefault(key, len(self._generations))
        used = frozenset().union(*(rule.pseudo_classes for rule in self.rules))
        if used != self._used_pseudo:
            self._used_pseudo, self._pseudo_checks = used, {}

    def update_nodes(self, nodes: Any, animate: bool = False) -> None:
        global _refreshes
        self._paths = {}
        outer, _refreshes = _refreshes, []
        try:
            super().update_nodes(nodes, animate)
        finally:
            self._paths = None
            asked, _refreshes = _refreshes, outer
            _refresh_once(asked)

    def _path(self, node: Any) -> tuple[Any, ...]:
        """The node's path for the caches: (type, id, classes, tested pseudo-classes) per node."""
        paths = self._paths
        assert paths is not None
        parent = node._parent
        if isinstance(parent, DOMNode):
            up = paths.get(id(parent))
            if up is None:
                up = paths[id(parent)] = self._path(parent)
        else:
            up = ()
        kind = type(node)
        checks = self._pseudo_checks.get(kind)
        if checks is None:  # only the pseudo-classes some selector tests: a few of Textual's 19
            checks = self._pseudo_checks[kind] = tuple(
                (name, test) for name, test in kind._PSEUDO_CLASSES.items() if name in self._used_pseudo)
        return (*up, (kind, node._id, node.classes, tuple(name for name, test in checks if test(node))))

    def apply(self, node: Any, *, animate: bool = False, cache: Any = None) -> None:
        if animate or self._paths is None:
            super().apply(node, animate=animate, cache=cache)
            return
        self.rules  # noqa: B018 - parses first if sources were added (a new widget class)
        key = (self._generation, self._path(node))
        given = self._given.get(key)
        if given is not None:
            rules, node._has_hover_style, node._has_focus_within, node._has_order_style, node._has_odd_or_even = given
            if rules is not None:
                self.replace_rules(node, rules)
        else:
            global _last_given
            _last_given = (0, None)  # Textual's apply gives no rules to a node no rule matches
            # Component classes are applied after, so that _last_given is still this node's.
            self._components_later = True
            try:
                super().apply(node, animate=False, cache=cache)
            finally:
                self._components_later = False
            if len(self._given) >= self._CACHE_MAX:
                self._given.clear()
            given_to, rules = _last_given
            self._given[key] = (rules if given_to == id(node) else None, node._has_hover_style,
                                node._has_focus_within, node._has_order_style, node._has_odd_or_even)
        self._process_component_classes(node)

    def _process_component_classes(self, node: Any) -> None:
        if not self._components_later:
            super()._process_component_classes(node)

    @classmethod
    def replace_rules(cls, node: Any, rules: Any, animate: bool = False) -> None:
        global _last_given
        _last_given = (id(node), rules)
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
            if _refreshes is not None and node._is_mounted:
                _refreshes.append((node, asked))  # during a whole pass: once per node, at its end
            else:
                base.refresh(**asked)
        node.notify_style_update()

    def reparse(self) -> None:
        # Textual's reparse builds a fresh Stylesheet so that bad CSS leaves the current rules
        # in place; parse() has the same property (self._rules is set only once all parsed).
        self.parse()

    def rehearse(self, nodes: Iterable[DOMNode], variables: dict[str, str]) -> None:
        """Work out what each of ``nodes`` would be given under ``variables`` (another theme's,
        parsed ahead by :meth:`warm`) and keep it, giving nothing: a first switch to that theme
        then only sets rules, as a switch back does. Matching selectors was 5-11 ms of a first
        switch's 12-18 ms restyle, against 7 ms for a switch back (140×44, unloaded). On the UI
        thread (it reads the tree), between keys; a theme not parsed yet would be parsed here."""
        dry = _Rehearsal(variables=variables)
        dry.source = dict(self.source)
        dry._by_theme, dry._lock, dry._generations, dry._given = (
            self._by_theme, self._lock, self._generations, self._given)
        dry.parse()
        dry._paths = {}
        cache: dict[tuple, Any] = {}
        for node in nodes:
            dry.apply(node, cache=cache)

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


class _Rehearsal(ThemeStylesheet):
    """A stylesheet that gives its rules to nobody: each node's are only worked out and kept,
    in the caches it shares with the stylesheet in use (:meth:`ThemeStylesheet.rehearse`)."""

    @classmethod
    def replace_rules(cls, node: Any, rules: Any, animate: bool = False) -> None:
        global _last_given
        _last_given = (id(node), rules)

    def _process_component_classes(self, node: Any) -> None:
        # Textual's keeps the styles on the node; here only its component classes' rules are.
        if self._components_later:
            return
        for component in sorted(node._get_component_classes()):
            virtual = DOMNode(classes=component)
            virtual._attach(node)  # sets its parent only: the node does not get a child
            self.apply(virtual)
