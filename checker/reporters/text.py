"""``concise`` (one line a finding) and ``full`` (with the source lines and the docs link)."""

from __future__ import annotations

from kcheck.finding import Finding, entry_url


def _line(f: Finding, ctx) -> str:
    return f"{ctx.display_path(f)}:{f.line}:{f.column}: {f.code} [{f.name}] {f.message}"


def render(findings: list[Finding], ctx) -> str:
    shown = [f for f in findings if f.suppressed is None]
    if ctx.format == "concise":
        body = [_line(f, ctx) for f in shown]
    else:
        body = []
        sources: dict[str, list[str]] = {}
        for f in shown:
            if f.path not in sources:
                try:
                    sources[f.path] = (ctx.root / f.path).read_text(encoding="utf-8", errors="replace").splitlines()
                except OSError:
                    sources[f.path] = []
            lines = sources[f.path]
            body.append(f"{_line(f, ctx)}  ({f.severity})")
            for n in range(max(1, f.line - 1), min(len(lines), f.end_line) + 1):
                marker = ">" if f.line <= n <= f.end_line else " "
                body.append(f" {marker} {n:>5} | {lines[n - 1]}")
            body.append(f"   docs: {f.url}")
            for entry in f.knowledge:
                body.append(f"   see:  {entry_url(entry, ctx.docs_url)}")
            body.append("")
    n = len(shown)
    if n:
        body.append(f"Found {n} finding{'s' if n != 1 else ''} in {len({f.path for f in shown})} file(s).")
    else:
        body.append(f"All checks passed ({ctx.files} file{'s' if ctx.files != 1 else ''}).")
    return "\n".join(body) + "\n"
