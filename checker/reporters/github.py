"""``github``: GitHub Actions workflow commands, which the runner turns into annotations.

GitHub shows at most 10 annotations of each level (error, warning, notice) per step and drops the
rest silently, in the order they were printed. So findings go out highest severity first, and when
the cap would drop some, one notice, printed first so it is never the one dropped, says how many.
"""

from __future__ import annotations

from kcheck.finding import Finding, severity_rank

COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}
PER_LEVEL_CAP = 10  # annotations GitHub keeps per level and step


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def dropped_by_cap(findings: list[Finding]) -> int:
    """How many of these annotations GitHub would not show (the count notice takes a notice slot)."""
    per = {level: sum(1 for f in findings if COMMANDS[f.severity] == level) for level in COMMANDS.values()}
    over = sum(max(0, n - PER_LEVEL_CAP) for n in per.values())
    if over and per["notice"] >= PER_LEVEL_CAP:
        over += 1  # the count notice itself pushes one more finding notice out
    return over


def render(findings: list[Finding], ctx) -> str:
    shown = sorted((f for f in findings if f.suppressed is None),
                   key=lambda f: (-severity_rank(f.severity), *f.sort_key))
    lines = []
    dropped = dropped_by_cap(shown)
    if dropped:
        lines.append(f"::notice title=kcheck::{_data(f'{len(shown)} findings; GitHub shows at most {PER_LEVEL_CAP} annotations per level, so {dropped} are not annotated here. All are in the log below, the SARIF upload and the summary.')}")
    for f in ctx.not_checked:
        lines.append(f"::warning file={_prop(ctx.repo_path(f))},title=kcheck::{_data(f'{ctx.repo_path(f)}: {f.message}')}")
    for f in shown:
        props = [f"file={_prop(ctx.repo_path(f))}"]
        if not f.cell:  # a notebook's lines are its cells', not the .ipynb's: the message names the cell
            props += [f"line={f.line}", f"col={f.column}"]
        if f.end_line >= f.line and not f.cell:
            props += [f"endLine={f.end_line}"]
            if f.end_line == f.line:
                props += [f"endColumn={f.end_column}"]
        props.append(f"title={_prop(f'kcheck {f.code} ({f.name})')}")
        message = f"{ctx.repo_path(f)}:{f.where}: {f.code} {f.message}\nDocs: {f.url}"
        lines.append(f"::{COMMANDS[f.severity]} {','.join(props)}::{_data(message)}")
    return "\n".join(lines) + ("\n" if lines else "")
