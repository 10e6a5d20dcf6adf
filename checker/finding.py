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
class Finding:
    """One problem kcheck reports at a place in a file.

    ``path`` is relative to the project root, with forward slashes. Lines and columns are
    1-based, as editors and SARIF count them. ``context`` is the enclosing function or class
    (dotted), and ``source_line`` the stripped text of the first reported line: together with
    path and code they key a finding independent of line numbers (baselines, fingerprints).
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

    def __post_init__(self) -> None:
        if not self.fingerprint:
            key = "\0".join((self.path, self.code, self.context, " ".join(self.source_line.split())))
            object.__setattr__(self, "fingerprint", hashlib.sha256(key.encode()).hexdigest()[:16])

    def to_dict(self) -> dict:
        data = asdict(self)
        data["knowledge"] = list(self.knowledge)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Finding":
        data = dict(data)
        data["knowledge"] = tuple(data.get("knowledge", ()))
        return cls(**data)

    @property
    def family(self) -> str:
        """``KC2`` for KC201: the hundreds digit names the family."""
        return self.code[:3]
