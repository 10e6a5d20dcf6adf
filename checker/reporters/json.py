"""``json``: a list of objects (suppressed findings left out) with ruff's fields, plus ``severity``, ``fingerprint`` and the catalog ids."""

from __future__ import annotations

import json

from kcheck.finding import Finding


def as_object(f: Finding, ctx) -> dict:
    return {
        "code": f.code,
        "name": f.name,
        "message": f.message,
        "severity": f.severity,
        "filename": f.path,
        "location": {"row": f.line, "column": f.column},
        "end_location": {"row": f.end_line, "column": f.end_column},
        "url": f.url,
        "knowledge": [
            {"id": k, "url": f"{ctx.docs_url.rstrip('/')}/catalog/{k}/"} for k in f.knowledge
        ],
        "context": f.context,
        "source_line": f.source_line,
        "fingerprint": f.fingerprint,
    }


def render(findings: list[Finding], ctx) -> str:
    return json.dumps([as_object(f, ctx) for f in findings if f.suppressed is None], indent=2) + "\n"
