"""``kcheck rule`` and ``kcheck rules``: a rule's docs, from its class, in the terminal."""

from __future__ import annotations

import inspect
import json

from kcheck.finding import DEFAULT_DOCS_URL, entry_url, rule_url
from kcheck.registry import FAMILIES, all_rules, find_rule


PREVIEW_NOTE = ("Preview: this rule is off by default until its precision is measured well enough. Turn it "
                "on with `--preview`, `preview = true` in [tool.kcheck], or by naming it in `select`.")


def rule_record(rule, docs_url: str = DEFAULT_DOCS_URL) -> dict:
    """Everything known about a rule, as plain data (for json output and the docs site)."""
    return {
        "code": rule.CODE,
        "name": rule.NAME,
        "family": FAMILIES[rule.CODE[:3]][1],
        "message": rule.MESSAGE,
        "severity": rule.SEVERITY,
        "preview": rule.PREVIEW,
        "knowledge": list(rule.KNOWLEDGE),
        "options": list(rule.OPTIONS),
        "docs": rule.docs(),
        "valid": [inspect.cleandoc(v) for v in rule.VALID],
        "invalid": [inspect.cleandoc(v) for v in rule.INVALID],
        "url": rule_url(rule.NAME, docs_url),
        "module": rule.__module__,
    }


def explain_rule(key: str, fmt: str = "text") -> str | None:
    rule = find_rule(key)
    if rule is None:
        return None
    record = rule_record(rule)
    if fmt == "json":
        return json.dumps(record, indent=2)
    out = [f"{rule.CODE} {rule.NAME} ({rule.SEVERITY}{', preview' if rule.PREVIEW else ''})", "",
           record["docs"].get("summary", "")]
    if rule.PREVIEW:
        out += ["", PREVIEW_NOTE]
    for section, text in record["docs"].items():
        if section != "summary":
            out += ["", f"## {section}", text]
    if rule.OPTIONS:
        out += ["", "## Options", *[f"- `{o}` in [tool.kcheck]" for o in rule.OPTIONS]]
    if rule.KNOWLEDGE:
        out += ["", "## Catalog entries"]
        try:
            from kcheck.catalog import load_catalog

            cat = load_catalog()
        except Exception:  # noqa: BLE001 - the explanation still prints without titles
            cat = None
        for entry_id in rule.KNOWLEDGE:
            entry = cat.get(entry_id) if cat else None
            title = entry.get("title", "") if entry else ""
            out.append(f"- {entry_id}: {title}  {entry_url(entry_id)}")
    out += ["", f"Docs: {record['url']}"]
    return "\n".join(out)


def list_rules(fmt: str = "text") -> str:
    rules = all_rules()
    if fmt == "json":
        return json.dumps([rule_record(r) for r in rules], indent=2)
    lines = []
    for r in rules:
        summary = r.docs().get("summary", "").splitlines()[0] if r.__doc__ else ""
        lines.append(f"{r.CODE}  {r.NAME:<40} {r.SEVERITY:<8} {'preview' if r.PREVIEW else 'stable':<8} {summary}")
    return "\n".join(lines)
