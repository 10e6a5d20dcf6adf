"""``rdjson`` (one DiagnosticResult) and ``rdjsonl`` (one Diagnostic a line): reviewdog's
diagnostic format, so ``kcheck check -o rdjson | reviewdog -f=rdjson -reporter=github-pr-review``
posts inline review comments. ``code.url`` links the rule's page; the message ends with the
catalog entries behind the rule.

reviewdog counts columns in UTF-8 bytes and treats the end as exclusive; kcheck counts code
points, so columns are converted with the file's text when it can be read.
"""

from __future__ import annotations

import json

from kcheck.finding import Finding, entry_url

SEVERITIES = {"error": "ERROR", "warning": "WARNING", "info": "INFO"}


def _byte_column(lines: list[str], line: int, column: int) -> int:
    if 1 <= line <= len(lines):
        return len(lines[line - 1][: column - 1].encode("utf-8")) + 1
    return column


def diagnostic(f: Finding, ctx) -> dict:
    lines = ctx.source_lines(f)
    message = f"cell {f.cell}, line {f.line}: {f.message}" if f.cell else f.message
    if f.knowledge:
        links = ", ".join(f"[{k}]({entry_url(k, ctx.docs_url)})" for k in f.knowledge)
        message += f"\n\nSee: {links}"
    location = {
        "path": ctx.repo_path(f),
        "range": {
            "start": {"line": f.line, "column": _byte_column(lines, f.line, f.column)},
            "end": {"line": f.end_line, "column": _byte_column(lines, f.end_line, f.end_column)},
        },
    }
    if f.cell:  # a notebook: its diff lines are JSON, not the cell's; the message names the cell
        del location["range"]
    return {
        "message": message,
        "location": location,
        "severity": SEVERITIES.get(f.severity, "WARNING"),
        "source": {"name": "kcheck", "url": ctx.docs_url},
        "code": {"value": f.code, "url": f.url},
        "original_output": f"{ctx.repo_path(f)}:{f.where}: {f.code} [{f.name}] {f.message}",
    }


def render(findings: list[Finding], ctx) -> str:
    diagnostics = [diagnostic(f, ctx) for f in findings if f.suppressed is None]
    diagnostics += [diagnostic(f, ctx) for f in ctx.not_checked]  # notices, at INFO
    if ctx.format == "rdjsonl":
        return "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in diagnostics)
    return json.dumps({"source": {"name": "kcheck", "url": ctx.docs_url}, "diagnostics": diagnostics},
                      indent=2, ensure_ascii=False) + "\n"
