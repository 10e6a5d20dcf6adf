"""Baselines: adopt kcheck on old code by recording today's findings and hiding only those.

An entry is keyed on what survives edits elsewhere in the file: the path, the rule code, the
enclosing function or class, and the source line with its whitespace normalised (the finding's
``fingerprint``). Line numbers are not part of the key, so code that moves stays baselined; a
finding whose line changes is new. When the same key occurs several times, the entry counts
them and hides at most that many.

An entry that matches nothing in a run that scanned its file is stale (the finding was fixed or
its line changed): kcheck reports it so the baseline only shrinks.

The file is JSON, sorted, one entry per finding key, so that it reviews well in a diff::

    {"kcheck-baseline": 1, "entries": [{"path": ..., "code": ..., "context": ...,
                                        "source_line": ..., "fingerprint": ..., "count": 1}]}
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kcheck.finding import Finding

FORMAT_VERSION = 1
DEFAULT_FILE = "kcheck-baseline.json"


class BaselineError(Exception):
    """A baseline file that cannot be read; the message names the file (and line)."""


@dataclass(frozen=True)
class Entry:
    path: str
    code: str
    context: str
    source_line: str
    fingerprint: str
    count: int = 1

    def describe(self) -> str:
        where = f" in {self.context}" if self.context else ""
        return f"{self.path}: {self.code}{where}: {self.source_line}"


def entries_for(findings: list[Finding]) -> list[Entry]:
    """One entry per fingerprint of the active (not suppressed) findings, sorted."""
    counts = Counter(f.fingerprint for f in findings if f.suppressed is None)
    first: dict[str, Finding] = {}
    for f in findings:
        if f.suppressed is None:
            first.setdefault(f.fingerprint, f)
    entries = [Entry(f.path, f.code, f.context, " ".join(f.source_line.split()), fp, counts[fp])
               for fp, f in first.items()]
    return sorted(entries, key=lambda e: (e.path, e.code, e.context, e.source_line, e.fingerprint))


def dumps(findings: list[Finding]) -> str:
    entries = [e.__dict__ for e in entries_for(findings)]
    return json.dumps({"kcheck-baseline": FORMAT_VERSION, "entries": entries}, indent=2, ensure_ascii=False) + "\n"


def load(path: Path) -> list[Entry]:
    """The entries of a baseline file; BaselineError names the file and the line of a problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BaselineError(f"{path}:{getattr(exc, 'lineno', 1)}: baseline is not valid JSON: "
                            f"{getattr(exc, 'msg', exc)}") from None
    if not isinstance(data, dict) or data.get("kcheck-baseline") != FORMAT_VERSION:
        raise BaselineError(f"{path}:1: not a kcheck baseline (expected \"kcheck-baseline\": {FORMAT_VERSION}); "
                            "write one with `kcheck baseline`")
    raw = data.get("entries")
    if not isinstance(raw, list):
        raise BaselineError(f"{path}:1: \"entries\" must be a list")
    entries = []
    for i, item in enumerate(raw):
        try:
            entry = Entry(**item)
            ok = all(isinstance(getattr(entry, k), str) for k in ("path", "code", "context", "source_line", "fingerprint"))
            ok = ok and isinstance(entry.count, int) and entry.count >= 1
        except TypeError:
            ok = False
        if not ok:
            line = _line_of_entry(text, i)
            raise BaselineError(f"{path}:{line}: entry {i} needs path, code, context, source_line, fingerprint "
                                "(strings) and count (a positive integer)")
        entries.append(entry)
    return entries


def _line_of_entry(text: str, index: int) -> int:
    """The line where the ``index``-th object of the entries list starts (best effort)."""
    start = text.find('"entries"')
    depth, seen = 0, -1
    for pos in range(max(start, 0), len(text)):
        ch = text[pos]
        if ch == "{":
            depth += 1
            if depth == 1:
                seen += 1
                if seen == index:
                    return text.count("\n", 0, pos) + 1
        elif ch == "}":
            depth -= 1
    return 1


def spend(findings, budget: Counter) -> tuple[list, list]:
    """(unmatched, matched) findings: each unsuppressed finding whose fingerprint still has a count
    left in ``budget`` takes one from it and is matched; ``budget`` keeps what is left. The
    baseline's entries and the findings at a diff base (``split_new``) are both counted this way."""
    unmatched, matched = [], []
    for f in findings:
        if f.suppressed is None and budget[f.fingerprint] > 0:
            budget[f.fingerprint] -= 1
            matched.append(f)
        else:
            unmatched.append(f)
    return unmatched, matched


def apply(findings: list[Finding], entries: list[Entry], scanned: set[str] | None = None):
    """(kept, baselined, stale): findings not in the baseline, findings it hides, and the
    entries that matched nothing. Only entries whose path is in ``scanned`` (when given) can be
    stale: a run over part of the tree says nothing about the rest."""
    budget = Counter()
    for e in entries:
        budget[e.fingerprint] += e.count
    kept, baselined = spend(findings, budget)
    stale = [e for e in entries if budget[e.fingerprint] > 0 and (scanned is None or e.path in scanned)]
    return kept, baselined, stale
