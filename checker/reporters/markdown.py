"""``markdown``: the pull-request summary, also printed by ``kcheck comment``.

It starts with a hidden marker (:data:`MARKER`) so the PR bot finds its own comment and edits it
in place. Then: the counts by family and severity, the new findings with links to their rule and
catalog entries, and, folded, the findings outside the changed lines and the baselined ones.
"""

from __future__ import annotations

from collections import Counter

from kcheck.finding import SEVERITIES, Finding, entry_url, severity_rank

MARKER = "<!-- kcheck:summary -->"
MAX_ITEMS = 100  # per list: a GitHub comment holds at most 65,536 characters
SECTION_TITLES = {
    "outside-diff": "outside the changed lines",
    "baselined": "in the baseline",
    "not-checked": "not checked: files kcheck did not check (the message says why)",
}


def _escape(text: str) -> str:
    """Keep finding text from being read as HTML or a mention."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("@", "@\u200b")


def _families() -> dict[str, str]:
    from kcheck.registry import FAMILIES

    return {prefix: title for prefix, (_, title) in FAMILIES.items()}


def _item(f: Finding, ctx, cat) -> str:
    from kcheck.reporters.sarif import catalog_title

    where = f"`{_escape(f.path)}:cell {f.cell}:{f.line}`" if f.cell else f"`{_escape(f.path)}:{f.line}`"
    text = f"- **{f.severity}** {where} [{f.code} {f.name}]({f.url}): {_escape(f.message)}"
    if f.knowledge:
        links = ", ".join(f"[{_escape(catalog_title(cat, k))}]({entry_url(k, ctx.docs_url)})" for k in f.knowledge)
        text += f"  \n  See: {links}"
    return text


def _list(findings: list[Finding], ctx, cat) -> list[str]:
    ordered = sorted(findings, key=lambda f: (-severity_rank(f.severity), *f.sort_key))
    out = [_item(f, ctx, cat) for f in ordered[:MAX_ITEMS]]
    if len(ordered) > MAX_ITEMS:
        out.append(f"- ... and {len(ordered) - MAX_ITEMS} more (see the full output)")
    return out


def _table(findings: list[Finding]) -> list[str]:
    titles = _families()
    counts = Counter((f.family, f.severity) for f in findings)
    levels = list(reversed(SEVERITIES))
    rows = ["| family | " + " | ".join(levels) + " |", "| --- |" + " ---: |" * len(levels)]
    for family in sorted({f.family for f in findings}):
        label = f"{family}xx {titles.get(family, '')}".strip()
        rows.append(f"| {label} | " + " | ".join(str(counts[(family, s)]) for s in levels) + " |")
    return rows


def render(findings: list[Finding], ctx) -> str:
    from kcheck.reporters.sarif import _catalog

    shown = [f for f in findings if f.suppressed is None]
    cat = _catalog() if (shown or ctx.hidden) else None
    n = len(shown)
    out = [MARKER]
    if n:
        out.append(f"### kcheck: {n} new finding{'s' if n != 1 else ''}")
        out += ["", *_table(shown), "", *_list(shown, ctx, cat)]
    else:
        out.append("### kcheck: no new findings")
    for why, title in SECTION_TITLES.items():
        group = [f for f, reason in ctx.hidden if reason == why]
        if group:
            noun = "file" if why == "not-checked" else "finding"
            out += ["", f"<details><summary>{len(group)} {noun}{'s' if len(group) != 1 else ''} {title}</summary>",
                    "", *_list(group, ctx, cat), "", "</details>"]
    out += ["", f"<sub>[kcheck]({ctx.docs_url}) links every finding to the rule and the catalog entry that explain it.</sub>"]
    return "\n".join(out) + "\n"
