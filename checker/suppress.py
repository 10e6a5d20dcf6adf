"""In-source suppressions.

- ``# kcheck: ignore[KC201] reason`` as a trailing comment covers the statement it is on; on a
  line of its own it covers the statement that follows. Rule names work as well as codes, and a
  code prefix (``KC2``) covers a family.
- ``# kcheck: file-ignore[KC1] reason`` anywhere covers the whole file.
- ``# noqa: KC201`` is honoured like a trailing ``kcheck: ignore``, also among other tools' codes
  (``# noqa: E501, KC201``).
- ``# kcheck: ignore`` with no list is a blanket suppression: it works, and KC903 reports it.

Reasons are required by default (KC902); suppressions that hide nothing are KC901.
"""

from __future__ import annotations

import ast
import bisect
import io
import re
import tokenize
from dataclasses import dataclass, field

from kcheck.rule import text_matcher

DIRECTIVE = re.compile(
    r"#\s*kcheck\s*:\s*(?P<kind>ignore|file-ignore)\b(?:\[(?P<list>[^\]]*)\])?(?P<reason>.*)$"
)
# a noqa list may name other tools' codes beside kcheck's (E501 and KC201 in one list): only KC codes count
NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<list>[A-Z]+\d+(?:\s*,\s*[A-Z]+\d+)*)(?P<reason>.*)$", re.IGNORECASE)
# a cheap test on the whole text before tokenizing: most files have no directive of kcheck's
# (``# noqa: E501`` is common; only ``noqa`` lists naming KC codes concern kcheck). Matched as the
# rules' prefilters are (``text_matcher``): a regex runs only where its leading word is in the text.
ANY_DIRECTIVE = text_matcher(r"(?i)kcheck\s*:|noqa\s*:[\s,a-z0-9]*kc\d")


@dataclass
class Directive:
    line: int  # where the comment is
    column: int
    kind: str  # ignore | file-ignore
    selectors: tuple[str, ...]  # empty = blanket
    reason: str
    own_line: bool
    target: tuple[int, int] | None = None  # the statement lines it covers
    used: set[str] = field(default_factory=set)

    def covers(self, code: str, name: str) -> bool:
        return not self.selectors or any(s == name or code.startswith(s) for s in self.selectors)

    @property
    def text(self) -> str:
        return ", ".join(self.selectors)


def parse_directives(source: str) -> list[Directive]:
    """Every suppression comment in ``source``, found with tokenize so strings are never read as comments."""
    if not ANY_DIRECTIVE(source):
        return []
    out: list[Directive] = []
    try:
        _read_directives(source, out)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # the directives before the error are kept; the file's syntax error is KC900's
    return out


def _read_directives(source: str, out: list[Directive]) -> None:
    """Append the directives of ``source`` to ``out``, reading the tokens one at a time (a list of
    every token of a 4 MB file would hold hundreds of MiB)."""
    prev_line_with_code = -1
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            own = prev_line_with_code != tok.start[0]
            m = DIRECTIVE.search(tok.string)
            if m:
                selectors = tuple(s.strip() for s in (m.group("list") or "").split(",") if s.strip())
                reason = m.group("reason").strip(" -:—\t")
                out.append(Directive(tok.start[0], tok.start[1] + 1, m.group("kind"), selectors, reason, own))
                continue
            m = NOQA.search(tok.string)
            codes = [c.strip().upper() for c in m.group("list").split(",")] if m else []
            selectors = tuple(c for c in codes if c.startswith("KC"))  # other tools' codes are theirs
            if selectors:
                reason = m.group("reason").strip(" -:—\t")
                out.append(Directive(tok.start[0], tok.start[1] + 1, "ignore", selectors, reason, own))
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            prev_line_with_code = tok.end[0]


def statement_spans(tree: ast.Module | None) -> list[tuple[int, int]]:
    """(first, last) lines of every simple statement and of every compound statement's header."""
    spans: list[tuple[int, int]] = []
    if tree is None:
        return spans
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        start = node.lineno
        if getattr(node, "decorator_list", None):
            start = min(d.lineno for d in node.decorator_list)
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            end = max(start, body[0].lineno - 1) if body[0].lineno > node.lineno else node.lineno
        else:
            end = node.end_lineno or node.lineno
        spans.append((start, end))
    return spans


class SpanIndex:
    """Statement spans indexed by line: the innermost span holding a line, and the first statement
    after a line, each in constant or logarithmic time (a 4 MB file has 100,000 spans and may have
    thousands of findings)."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.inner: dict[int, tuple[int, int]] = {}
        # longest first, and of equal length the earliest last: the shortest span holding a line
        # wins, the first of equal ones as a scan in order would pick
        for _, span in sorted(enumerate(spans), key=lambda t: (t[1][0] - t[1][1], -t[0])):
            for line in range(span[0], span[1] + 1):
                self.inner[line] = span
        self.longest_at: dict[int, tuple[int, int]] = {}
        for span in spans:
            known = self.longest_at.get(span[0])
            if known is None or span[1] - span[0] > known[1] - known[0]:
                self.longest_at[span[0]] = span
        self.starts = sorted(self.longest_at)

    def innermost(self, line: int) -> tuple[int, int] | None:
        return self.inner.get(line)

    def after(self, line: int) -> tuple[int, int] | None:
        """The longest of the statements that start first after ``line``."""
        i = bisect.bisect_right(self.starts, line)
        return self.longest_at[self.starts[i]] if i < len(self.starts) else None


def _index(spans) -> SpanIndex:
    return spans if isinstance(spans, SpanIndex) else SpanIndex(spans)


def attach(directives: list[Directive], spans) -> None:
    """Decide which statement each line directive covers (``spans``: a list or a :class:`SpanIndex`)."""
    index = _index(spans)
    for d in directives:
        if d.kind != "ignore":
            continue
        if d.own_line:
            following = index.after(d.line)
            if following is not None:
                d.target = following
        else:
            d.target = index.innermost(d.line) or (d.line, d.line)


def match(directives: list[Directive], spans, code: str, name: str, line: int) -> Directive | None:
    """The directive that hides a finding of ``code`` at ``line``, if any (marking it used);
    ``spans`` a list or a :class:`SpanIndex` (built once for many findings)."""
    span = _index(spans).innermost(line) or (line, line)
    for d in directives:
        hit = d.kind == "file-ignore" or (d.target is not None and (d.target == span or d.target[0] <= line <= d.target[1]))
        if hit and d.covers(code, name):
            d.used.add(code)
            return d
    return None
