"""``concise`` (one line a finding) and ``full`` (with the source lines and the docs link).

A finding in a Jupyter notebook reads ``nb.ipynb:cell 3:5:1: ...`` (ruff's notation: the cell, then
the line and column within it). Files kcheck did not check (too large, a non-Python notebook) are
named on stderr and counted in the summary line; with ``-q``, which silences stderr and leaves the summary out, they are listed here instead. On a terminal the output is coloured
(``ReportContext.color``)."""

from __future__ import annotations

from kcheck.finding import Finding, entry_url

_STYLES = {"path": "1", "code": "1;31", "dim": "2", "ok": "32", "warn": "33"}


def _paint(text: str, style: str, ctx) -> str:
    return f"\x1b[{_STYLES[style]}m{text}\x1b[0m" if ctx.color else text


def _line(f: Finding, ctx) -> str:
    return (f"{_paint(ctx.display_path(f), 'path', ctx)}:{f.where}: {_paint(f.code, 'code', ctx)} "
            f"[{f.name}] {f.message}")


def render(findings: list[Finding], ctx) -> str:
    shown = [f for f in findings if f.suppressed is None]
    if ctx.format == "concise":
        body = [_line(f, ctx) for f in shown]
    else:
        body = []
        for f in shown:
            lines = ctx.lines_of(f)  # a notebook finding's: its cell's
            body.append(f"{_line(f, ctx)}  ({f.severity})")
            for n in range(max(1, f.line - 1), min(len(lines), f.end_line) + 1):
                marker = ">" if f.line <= n <= f.end_line else " "
                body.append(f" {marker} {n:>5} | {lines[n - 1]}")
            for r in f.related:  # where the work really happens (a helper's library op)
                body.append(f"   note: line {r.line}: {r.message}")
            body.append(f"   docs: {f.url}")
            for entry in f.knowledge:
                body.append(f"   see:  {entry_url(entry, ctx.docs_url)}")
            body.append("")
    skipped = ctx.not_checked
    for f in (skipped if ctx.quiet else ()):  # otherwise stderr has named them already
        body.append(f"{_paint(ctx.display_path(f), 'path', ctx)}: {_paint(f.message, 'warn', ctx)}")
    if not ctx.quiet:
        n = len(shown)
        checked = ctx.files - len(skipped)
        if n:
            line = f"Found {n} finding{'s' if n != 1 else ''} in {len({f.path for f in shown})} file(s)."
        elif skipped:
            line = f"No findings in {checked} file{'s' if checked != 1 else ''} checked."
        else:
            line = _paint(f"All checks passed ({ctx.files} file{'s' if ctx.files != 1 else ''}).", "ok", ctx)
        if skipped:
            line += " " + _paint(f"{len(skipped)} file{'s' if len(skipped) != 1 else ''} not checked (see the messages above).",
                                 "warn", ctx)
        if ctx.preview_off:
            line += " " + _paint(f"{ctx.preview_off} preview rule{'s' if ctx.preview_off != 1 else ''} did not run "
                                 "(`--preview` runs them; `kcheck rules` lists them).", "warn", ctx)
        body.append(line)
    return "\n".join(body) + ("\n" if body else "")
