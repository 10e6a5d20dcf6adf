"""The one record every part of kcheck passes around: a finding."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field

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
