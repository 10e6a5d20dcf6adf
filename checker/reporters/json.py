"""``json`` (a list) and ``json-lines`` (one object a line): ruff's fields, plus ``severity``,
``fingerprint``, the catalog ids and ``related`` (other places the finding points at, each with a
note: SARIF's related locations). ``cell`` is null except in a Jupyter notebook, where it is the
cell's number (1-based, all cells counted) and ``location``/``end_location`` count within that
cell, as ruff reports notebooks.

In-source suppressed findings are left out. Findings hidden by ``--diff-base`` or ``--baseline``
follow the others, each with ``"hidden": "outside-diff"`` or ``"baselined"``; they never count
for the exit code. ``kcheck comment`` reads this list back (:func:`load`).
"""

from __future__ import annotations

import json

from kcheck.finding import Finding, Related, entry_url


def as_object(f: Finding, ctx) -> dict:
    return {
        "code": f.code,
        "name": f.name,
        "message": f.message,
        "severity": f.severity,
        "filename": f.path,
        "cell": f.cell or None,
        "location": {"row": f.line, "column": f.column},
        "end_location": {"row": f.end_line, "column": f.end_column},
        "url": f.url,
        "knowledge": [
            {"id": k, "url": entry_url(k, ctx.docs_url)} for k in f.knowledge
        ],
        "context": f.context,
        "source_line": f.source_line,
        "fingerprint": f.fingerprint,
        "related": [{"location": {"row": r.line, "column": r.column},
                     "end_location": {"row": r.end_line, "column": r.end_column}, "message": r.message}
                    for r in f.related],
    }


def objects(findings: list[Finding], ctx) -> list[dict]:
    out = [as_object(f, ctx) for f in findings if f.suppressed is None]
    for f, why in ctx.hidden:
        out.append({**as_object(f, ctx), "hidden": why})
    return out


def render(findings: list[Finding], ctx) -> str:
    items = objects(findings, ctx)
    if ctx.format == "json-lines":
        return "".join(json.dumps(item) + "\n" for item in items)
    return json.dumps(items, indent=2) + "\n"


def from_object(item: dict) -> Finding:
    """The finding an object of :func:`as_object` describes (``url`` and ``fingerprint`` kept)."""
    return Finding(
        code=item["code"], name=item["name"], message=item["message"], severity=item["severity"],
        path=item["filename"], line=item["location"]["row"], column=item["location"]["column"],
        end_line=item["end_location"]["row"], end_column=item["end_location"]["column"],
        knowledge=tuple(k["id"] if isinstance(k, dict) else k for k in item.get("knowledge", ())),
        url=item.get("url", ""), context=item.get("context", ""), source_line=item.get("source_line", ""),
        fingerprint=item.get("fingerprint", ""), cell=item.get("cell") or 0,
        related=tuple(Related(r["location"]["row"], r["location"]["column"], r["end_location"]["row"],
                              r["end_location"]["column"], r.get("message", "")) for r in item.get("related", ())),
    )


def load(text: str, name: str = "<results>") -> tuple[list[Finding], list[tuple[Finding, str]]]:
    """(shown, hidden) findings from ``json`` or ``json-lines`` output; ValueError names the
    file and line of anything malformed."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{name}:{getattr(exc, 'lineno', 1)}: not valid JSON: {getattr(exc, 'msg', exc)}") from None
        numbered = [(1, item) for item in items]
    else:
        numbered = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    numbered.append((n, json.loads(line)))
                except ValueError as exc:
                    raise ValueError(f"{name}:{n}: not valid JSON: {getattr(exc, 'msg', exc)}") from None
    shown, hidden = [], []
    for n, item in numbered:
        try:
            f = from_object(item)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{name}:{n}: not a kcheck finding (missing {exc})") from None
        if isinstance(item, dict) and item.get("hidden"):
            hidden.append((f, str(item["hidden"])))
        else:
            shown.append(f)
    return shown, hidden
