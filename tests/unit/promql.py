"""Metric names a PromQL expression selects, found by stripping everything that is not a selector name.

Not a full PromQL parser: it removes string literals, label matchers (``{...}``), range and subquery
brackets (``[...]``), grouping clauses (``by (...)``, ``on (...)``, ``group_left(...)``...), function
calls' names, keywords and numbers; what is left are the metric names. Good enough for the rules and
dashboard of this repository, and tested on the shapes they use.
"""

from __future__ import annotations

import re

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE)
_IDENTIFIER = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_KEYWORDS = frozenset({"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool"})
_KEYWORDS |= {"offset", "inf", "nan", "e"}


def metric_names(expr: str) -> set[str]:
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def base_name(sample_name: str) -> str:
    """``gateway_x_seconds_bucket`` -> ``gateway_x_seconds`` (histogram series), other names unchanged."""
    for suffix in ("_bucket", "_sum", "_count"):
        if sample_name.endswith(suffix):
            return sample_name[: -len(suffix)]
    return sample_name
