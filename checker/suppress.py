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
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return out
    prev_line_with_code = -1
    for tok in tokens:
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
    return out


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


def _innermost(spans: list[tuple[int, int]], line: int) -> tuple[int, int] | None:
    best = None
    for span in spans:
        if span[0] <= line <= span[1] and (best is None or span[1] - span[0] < best[1] - best[0]):
            best = span
    return best


def attach(directives: list[Directive], spans: list[tuple[int, int]]) -> None:
    """Decide which statement each line directive covers."""
    for d in directives:
        if d.kind != "ignore":
            continue
        if d.own_line:
            following = [s for s in spans if s[0] > d.line]
            if following:
                first = min(s[0] for s in following)
                d.target = max((s for s in following if s[0] == first), key=lambda s: s[1] - s[0])
        else:
            d.target = _innermost(spans, d.line) or (d.line, d.line)


def match(directives: list[Directive], spans: list[tuple[int, int]], code: str, name: str, line: int) -> Directive | None:
    """The directive that hides a finding of ``code`` at ``line``, if any (marking it used)."""
    span = _innermost(spans, line) or (line, line)
    for d in directives:
        hit = d.kind == "file-ignore" or (d.target is not None and (d.target == span or d.target[0] <= line <= d.target[1]))
        if hit and d.covers(code, name):
            d.used.add(code)
            return d
    return None
