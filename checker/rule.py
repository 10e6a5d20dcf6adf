"""The rule base class: one rule = one module = one class.

A rule is a libcst ``BatchableCSTVisitor``: the engine parses a file once and runs every enabled
rule over the same tree in one walk. The class carries, in this order: a docstring with ruff's
headings (What it does / Why is this bad? / Example / Use instead / References), ``CODE``,
``NAME``, ``MESSAGE``, ``SEVERITY``, ``KNOWLEDGE`` (catalog ids), ``VALID``/``INVALID`` examples,
then its ``visit_*`` methods. The docs page, ``kcheck rule`` and the example tests all come from
the class. ``PREVIEW = True`` marks a preview rule: off by default, on with ``--preview``,
``preview = true`` in the configuration, or when ``select`` names it by code or name (not by a
prefix); ``kcheck rules`` and its docs page say so.

Two cheap class-level declarations keep libcst off files a rule cannot fire on: ``PREFILTER``
(regexes the file's text must match) and ``NEEDS`` (facts about the file's ``ast``, one of which
must hold: :mod:`kcheck.facts`). Neither decides anything the rule decides again.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

from kcheck import facts

if TYPE_CHECKING:
    from kcheck.config import Config
    from kcheck.gate import Summary
    from kcheck.model import ModuleModel

# ``PREFILTER`` patterns are matched cheaply. A regex that tries several alternatives at every
# position of a large file is slow, and ``\b`` defeats the regex engine's literal-prefix search, so
# each ``|`` alternative is matched on its own: a plain word (``\.``, ``\(`` allowed) with
# ``str.__contains__``, a whole word (``\bword\b``) by finding the word and looking at the
# characters around it, anything else with a small regex that runs only when its longest required
# literal is in the text. The answer is exactly the regex's.
_PLAIN = re.compile(r"(?:[^\\|()\[\]{}.*+?^$]|\\[.()\[\]{}*+?^$])+")
_ATOM = re.compile(r"\\[bB]|\\.|\[(?:\\.|[^\]])*\]|.")
_QUANTIFIER = re.compile(r"[?*+]|\{[^}]*\}")


def _required_literal(word: str) -> str | None:
    """The longest run of characters every match of ``word`` (a regex without groups) must contain."""
    best, run, i = "", "", 0
    while i < len(word):
        atom = _ATOM.match(word, i).group()
        i += len(atom)
        quant = _QUANTIFIER.match(word, i)
        if quant:
            i += len(quant.group())
        literal = atom[1] if len(atom) == 2 and atom[0] == "\\" and not atom[1].isalnum() else (
            atom if len(atom) == 1 and atom not in ".^$" else None)
        if literal is not None and (quant is None or quant.group() == "+"):
            run += literal
            if quant is not None:  # "a+": one "a" is required, what follows may not be adjacent
                best, run = max(best, run, key=len), ""
        elif atom in (r"\b", r"\B"):
            continue  # zero-width: the run goes on
        else:
            best, run = max(best, run, key=len), ""
    best = max(best, run, key=len)
    return best or None


def text_matcher(pattern: str):
    """A function ``text -> bool``: whether the regex ``pattern`` matches somewhere in ``text``."""
    fold = pattern.startswith("(?i)")
    body = pattern[4:] if fold else pattern
    classes = re.findall(r"(?<!\\)\[[^\]]*\]", body)
    if re.search(r"(?<!\\)[()]", body) or "\\|" in body or any("|" in c for c in classes):
        whole = re.compile(pattern)  # groups or a literal "|": keep the regex whole
        return lambda text: whole.search(text) is not None
    plain: list[str] = []
    whole: list[str] = []
    guarded: list[tuple[str, re.Pattern]] = []
    for word in body.split("|"):
        if _PLAIN.fullmatch(word):
            literal = re.sub(r"\\(.)", r"\1", word)
            plain.append(literal.lower() if fold else literal)
        elif not fold and _WHOLE.fullmatch(word):  # (lower-casing can change the characters around a word)
            whole.append(word[2:-2])
        else:
            literal = _required_literal(word) or ""
            guarded.append((literal.lower() if fold else literal, re.compile(word, re.IGNORECASE if fold else 0)))
    words = tuple(plain)

    def matches(text: str) -> bool:
        if fold:
            text = text.lower()
        return (any(w in text for w in words) or any(_whole_word(text, w) for w in whole)
                or any(lit in text and rx.search(text) for lit, rx in guarded))

    return matches


_WHOLE = re.compile(r"\\b\w+\\b")  # \bword\b, the word made of letters, digits and underscores only


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"  # what ``\w`` matches in a str pattern


def _whole_word(text: str, word: str) -> bool:
    r"""Whether ``\bword\b`` matches in ``text`` (``word`` made of word characters only)."""
    end = len(text) - len(word)
    i = text.find(word)
    while i >= 0:
        if (i == 0 or not _is_word_char(text[i - 1])) and (i == end or not _is_word_char(text[i + len(word)])):
            return True
        i = text.find(word, i + 1)
    return False


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
    line: int | None = None  # a line of the file to report at instead of the node's (inside a string it holds)
    related: tuple = ()  # (node, note) pairs: other places the finding points at (Finding.related)


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
    NEEDS: ClassVar[tuple] = ()  # facts (kcheck.facts) of which one must hold; a tuple entry needs all its facts
    PREVIEW: ClassVar[bool] = False  # a preview rule: off unless previews are on or it is selected by code or name

    _prefilter_res: ClassVar[tuple[re.Pattern, ...] | None] = None

    def __init__(self, context: FileContext) -> None:
        super().__init__()
        self.context = context
        self.model = context.model
        self.config = context.config
        self.reports: list[Report] = []

    # -- cheap decisions, before libcst -------------------------------------------------------

    @classmethod
    def prefilter(cls, text: str, config: "Config | None" = None, seen: dict | None = None) -> bool:
        """Whether the file's text matches every ``PREFILTER`` pattern. ``seen`` (one dict per
        file) remembers each pattern's answer, since rules of a family share patterns. A rule that
        needs the configuration to decide (one that runs on every configured kernel path) overrides this."""
        if cls.__dict__.get("_prefilter_res") is None:
            cls._prefilter_res = tuple((p, text_matcher(p)) for p in cls.PREFILTER)
        for pattern, matches in cls._prefilter_res:
            hit = seen.get(pattern) if seen is not None else None
            if hit is None:
                hit = matches(text)
                if seen is not None:
                    seen[pattern] = hit
            if not hit:
                return False
        return True

    @classmethod
    def gate(cls, summary: "Summary", config: "Config") -> bool:
        """Whether the rule can fire on a file with this ``ast`` summary: one of its ``NEEDS``
        holds (:mod:`kcheck.facts`). Rules declare facts; they do not override this."""
        return facts.holds(cls.NEEDS, summary, config)

    # -- reporting ------------------------------------------------------------------------------

    def report(self, node: cst.CSTNode, message: str | None = None, *, line: int | None = None,
               related: tuple = (), **fmt: object) -> None:
        """Report ``node`` (or, with ``line``, that line of the file: C++ source inside a string
        that ``node`` enters) with ``message`` or the rule's ``MESSAGE`` formatted with ``fmt``;
        ``related``: (node, note) pairs for the other places the finding points at."""
        text = message if message is not None else self.MESSAGE
        if fmt:
            text = text.format(**fmt)
        self.reports.append(Report(type(self), node, text, self.model.context_of(node), line=line,
                                   related=tuple(related)))

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
