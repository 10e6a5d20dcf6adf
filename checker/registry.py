"""Finds every rule class under ``kcheck.rules``; nothing is registered by hand."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

FAMILIES = {
    "KC1": ("dispatch", "Library dispatch presented as a kernel"),
    "KC2": ("timed_path", "Logging and host syncs in timed and per-step paths"),
    "KC3": ("fallback", "Missing and silent fallbacks"),
    "KC4": ("measurement", "Weak verification and measurement"),
    "KC5": ("triton", "Triton kernel hygiene"),
    "KC9": ("meta", "Suppressions and parse errors"),
}


@lru_cache(maxsize=1)
def all_rules() -> tuple[type, ...]:
    """Every rule class, sorted by code. Codes and names are checked to be unique."""
    from kcheck import rules
    from kcheck.rule import Rule

    found: dict[str, type] = {}
    names: dict[str, str] = {}
    for info in pkgutil.walk_packages(rules.__path__, prefix="kcheck.rules."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Rule) and obj.CODE and obj.__module__ == module.__name__:
                prefix = obj.CODE[:3]
                family_folder = FAMILIES.get(prefix, (None,))[0]
                if family_folder != module.__name__.split(".")[-2]:
                    raise RuntimeError(f"{obj.CODE} lives in {module.__name__}, not in rules/{family_folder}/")
                if obj.CODE in found:
                    raise RuntimeError(f"duplicate rule code {obj.CODE}")
                if obj.NAME in names:
                    raise RuntimeError(f"duplicate rule name {obj.NAME} ({names[obj.NAME]}, {obj.CODE})")
                found[obj.CODE] = obj
                names[obj.NAME] = obj.CODE
    return tuple(found[c] for c in sorted(found))


def find_rule(key: str) -> type | None:
    """A rule by code (case-insensitive) or kebab name."""
    for rule in all_rules():
        if key.upper() == rule.CODE or key == rule.NAME:
            return rule
    return None
