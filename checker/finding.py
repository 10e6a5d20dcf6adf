"""The one record every part of kcheck passes around: a finding."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace

SEVERITIES = ("info", "warning", "error")
DEFAULT_DOCS_URL = "https://kcheck.github.io/kcheck/"


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


def rule_url(name: str, base_url: str = DEFAULT_DOCS_URL) -> str:
    """The docs page of a rule, by its kebab name."""
    return f"{base_url.rstrip('/')}/rules/{name}/"


def entry_url(entry_id: str, base_url: str = DEFAULT_DOCS_URL) -> str:
    """The docs page of a catalog entry: ``<base>/catalog/<topic>/<slug>/``."""
    return f"{base_url.rstrip('/')}/catalog/{entry_id}/"


@dataclass(frozen=True)
class Related:
    """Another place a finding points at: where the work it describes really happens (the library
    op inside the helper a claim calls), with a note on what is there. SARIF's ``relatedLocations``."""

    line: int
    column: int
    end_line: int
    end_column: int
    message: str


@dataclass(frozen=True)
class Finding:
    """One problem kcheck reports at a place in a file.

    ``path`` is relative to the project root, with forward slashes. Lines and columns are
    1-based, as editors and SARIF count them. ``context`` is the enclosing function or class
    (dotted), and ``source_line`` the stripped text of the first reported line: together with
    path and code they key a finding independent of line numbers (baselines, fingerprints).
    In a Jupyter notebook ``cell`` is the cell's number and lines count from its first line.
    """

    code: str
    name: str
    message: str
    severity: str
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    knowledge: tuple[str, ...] = ()
    url: str = ""
    context: str = ""
    source_line: str = ""
    suppressed: str | None = None  # the justification, when an in-source suppression hid it
    fingerprint: str = field(default="")
    cell: int = 0  # in a notebook: the cell (1-based, all cells counted); ``line`` is then within it
    related: tuple[Related, ...] = ()  # other places the finding points at (same file)

    @property
    def where(self) -> str:
        """``5:1``, or ``cell 3:5:1`` in a notebook (ruff's notation): what follows the path."""
        return f"cell {self.cell}:{self.line}:{self.column}" if self.cell else f"{self.line}:{self.column}"

    @property
    def sort_key(self) -> tuple:
        return (self.path, self.cell, self.line, self.column, self.code)

    def __post_init__(self) -> None:
        if not self.fingerprint:
            key = "\0".join((self.path, self.code, self.context, " ".join(self.source_line.split())))
            object.__setattr__(self, "fingerprint", hashlib.sha256(key.encode()).hexdigest()[:16])

    def to_dict(self) -> dict:
        data = asdict(self)
        data["knowledge"] = list(self.knowledge)
        data["related"] = list(data["related"])  # asdict made each a dict
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Finding":
        data = dict(data)
        data["knowledge"] = tuple(data.get("knowledge", ()))
        data["related"] = tuple(Related(**r) for r in data.get("related", ()))
        return cls(**data)

    @property
    def family(self) -> str:
        """``KC2`` for KC201: the hundreds digit names the family."""
        return self.code[:3]


def group_by_context(findings: list[Finding]) -> list[Finding]:
    """One finding per rule and function (or class): the first occurrence, its message ending with
    how many more places in that function have the same problem, and each of them as a related
    location with its own message. Module-level findings, suppressed ones and the meta rules
    (KC9xx, one per suppression comment or file) stay one per place."""
    groups: dict[tuple, list[Finding]] = {}
    out: list[Finding] = []
    for f in sorted(findings, key=lambda f: f.sort_key):
        if not f.context or f.suppressed is not None or f.code.startswith("KC9"):
            out.append(f)
            continue
        key = (f.path, f.cell, f.code, f.context)
        if key not in groups:
            groups[key] = []
            out.append(f)
        groups[key].append(f)
    merged = {}
    for group in groups.values():
        first, rest = group[0], group[1:]
        if not rest:
            continue
        lines = sorted({g.line for g in rest})
        shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
        more = f" ({len(rest)} more in {first.context}: line{'s' if len(lines) > 1 else ''} {shown})"
        related = first.related + tuple(
            Related(g.line, g.column, g.end_line, g.end_column, _what_differs(g.message, first.message)) for g in rest)
        merged[id(first)] = replace(first, message=first.message + more, related=related)
    return [merged.get(id(f), f) for f in out]


def _what_differs(message: str, first: str) -> str:
    """``message`` without the words it ends with in common with ``first`` (what a related note
    needs: "row * mlp_hidden", not the rule's advice again); "the same" when nothing differs."""
    words, other = message.split(" "), first.split(" ")
    n = 0
    while n < min(len(words), len(other)) and words[-1 - n] == other[-1 - n]:
        n += 1
    kept = " ".join(words[:len(words) - n]) if n else message
    return kept or "the same"
