"""The rule base class: one rule = one module = one class.

A rule is a libcst ``BatchableCSTVisitor``: the engine parses a file once and runs every enabled
rule over the same tree in one walk. The class carries, in this order: a docstring with ruff's
headings (What it does / Why is this bad? / Example / Use instead / References), ``CODE``,
``NAME``, ``MESSAGE``, ``SEVERITY``, ``KNOWLEDGE`` (catalog ids), ``VALID``/``INVALID`` examples,
then its ``visit_*`` methods. The docs page, ``kcheck rule`` and the example tests all come from
the class.

Two cheap class-level hooks keep libcst off files a rule cannot fire on: ``PREFILTER`` (a regex
the file's text must match) and ``gate(summary)`` (a decision over the file's ``ast`` summary).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

if TYPE_CHECKING:
    from kcheck.config import Config
    from kcheck.gate import Summary
    from kcheck.model import ModuleModel

DOC_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Options", "References")


@dataclass
class FileContext:
    """What a rule sees of the file it checks."""

    path: str  # relative to the project root, forward slashes
    source: str
    module: cst.Module
    model: "ModuleModel"
    config: "Config"


@dataclass
class Report:
    """A finding before positions are resolved: the node and the message."""

    rule: type["Rule"]
    node: cst.CSTNode
    message: str
    context: str = ""
    extra: dict = field(default_factory=dict)


class Rule(cst.BatchableCSTVisitor):
    CODE: ClassVar[str] = ""
    NAME: ClassVar[str] = ""
    MESSAGE: ClassVar[str] = ""
    SEVERITY: ClassVar[str] = "warning"
    KNOWLEDGE: ClassVar[tuple[str, ...]] = ()
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[str]] = []
    OPTIONS: ClassVar[tuple[str, ...]] = ()  # the [tool.kcheck] keys this rule reads
    PREFILTER: ClassVar[tuple[str, ...]] = ()  # regexes the file's text must all match

    _prefilter_res: ClassVar[tuple[re.Pattern, ...] | None] = None

    def __init__(self, context: FileContext) -> None:
        super().__init__()
        self.context = context
        self.model = context.model
        self.config = context.config
        self.reports: list[Report] = []

    # -- cheap decisions, before libcst -------------------------------------------------------

    @classmethod
    def prefilter(cls, text: str) -> bool:
        if cls.__dict__.get("_prefilter_res") is None:
            cls._prefilter_res = tuple(re.compile(p) for p in cls.PREFILTER)
        return all(p.search(text) for p in cls._prefilter_res)

    @classmethod
    def gate(cls, summary: "Summary", config: "Config") -> bool:
        """Whether the rule can fire on a file with this ``ast`` summary (default: yes)."""
        return True

    # -- reporting ------------------------------------------------------------------------------

    def report(self, node: cst.CSTNode, message: str | None = None, **fmt: object) -> None:
        text = message if message is not None else self.MESSAGE
        if fmt:
            text = text.format(**fmt)
        self.reports.append(Report(type(self), node, text, self.model.context_of(node)))

    # -- documentation --------------------------------------------------------------------------

    @classmethod
    def docs(cls) -> dict[str, str]:
        """The docstring split into its ``## Heading`` sections (plus ``summary`` for the first line)."""
        text = inspect.cleandoc(cls.__doc__ or "")
        sections: dict[str, str] = {}
        current = "summary"
        buf: list[str] = []
        for line in text.splitlines():
            if line.startswith("## "):
                sections[current] = "\n".join(buf).strip()
                current, buf = line[3:].strip(), []
            else:
                buf.append(line)
        sections[current] = "\n".join(buf).strip()
        return {k: v for k, v in sections.items() if v}

    @classmethod
    def family(cls) -> str:
        return cls.__module__.split(".")[-2]
