"""``sarif``: SARIF 2.1.0 for GitHub code scanning and other SARIF viewers.

Every rule is described in ``tool.driver.rules`` (its docs as ``help.markdown``, its page as
``helpUri``); each result carries the level from its severity, a path relative to the
repository's top (percent-encoded, as a URI must be), and ``partialFingerprints`` from the
finding's line-number-free fingerprint plus its occurrence number among findings with the same
fingerprint, so alerts follow code that moves and two identical lines in one function stay two
alerts. In-source suppressed findings are included with a ``suppressions`` entry holding their
justification, as the format intends. Files kcheck did not check are tool execution
notifications. ``--sarif-rules fired`` describes only the rules that reported something (a smaller
file); by default every rule is described.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from kcheck import __version__
from kcheck.finding import Finding, entry_url

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
FINGERPRINT_KEY = "kcheck/v2"  # v2: the occurrence number follows the fingerprint


def _catalog():
    try:
        from kcheck.catalog import load_catalog

        return load_catalog()
    except Exception:  # noqa: BLE001 - titles are a nicety; links still work without them
        return None


def catalog_title(cat, entry_id: str) -> str:
    if cat is None:
        return entry_id
    try:
        return str(cat.get(entry_id).get("title") or entry_id)
    except KeyError:
        return entry_id


def help_markdown(rule, docs_url: str, cat) -> str:
    """The rule's docs as Markdown: its sections, then its catalog entries as links."""
    docs = rule.docs()
    parts = [docs.get("summary", "")]
    for section, text in docs.items():
        if section != "summary":
            parts.append(f"## {section}\n\n{text}")
    if rule.KNOWLEDGE:
        links = "\n".join(f"- [{catalog_title(cat, k)}]({entry_url(k, docs_url)})" for k in rule.KNOWLEDGE)
        parts.append(f"## References\n\n{links}")
    return "\n\n".join(p for p in parts if p)


def rule_descriptor(rule, docs_url: str, cat) -> dict:
    from kcheck.explain import rule_record

    record = rule_record(rule, docs_url)
    docs = record["docs"]
    summary = docs.get("summary", "").splitlines()[0] if docs.get("summary") else rule.NAME
    full = " ".join(docs.get("What it does", summary).split())
    markdown = help_markdown(rule, docs_url, cat)
    return {
        "id": rule.CODE,
        "name": rule.NAME,
        "shortDescription": {"text": summary},
        "fullDescription": {"text": full},
        "help": {"text": f"{full}\n\nDocs: {record['url']}", "markdown": markdown},
        "helpUri": record["url"],
        "defaultConfiguration": {"level": LEVELS[rule.SEVERITY]},
        "properties": {"tags": ["kcheck", rule.family().replace("_", "-")], "knowledge": list(rule.KNOWLEDGE)},
    }


def uri(path: str) -> str:
    """A repository-relative path as a URI reference: spaces, ``%``, ``#`` and the like encoded."""
    return quote(path, safe="/")


def result(f: Finding, index: int | None, ctx, occurrence: int = 1) -> dict:
    region = {"startLine": f.line, "startColumn": f.column}
    if (f.end_line, f.end_column) > (f.line, f.column):
        region.update(endLine=f.end_line, endColumn=f.end_column)
    physical = {"artifactLocation": {"uri": uri(ctx.repo_path(f)), "uriBaseId": "%SRCROOT%"}, "region": region}
    text = f"{f.message} ({f.name})"
    if f.cell:
        # a notebook: a region would point into the .ipynb's JSON, whose lines are not the cell's, so
        # the result names the file alone and carries the cell and the region within it as properties
        del physical["region"]
        text = f"cell {f.cell}, line {f.line}: {text}"
    out = {
        "ruleId": f.code,
        "level": LEVELS.get(f.severity, "warning"),
        "message": {"text": text},
        "locations": [{"physicalLocation": physical}],
        "partialFingerprints": {FINGERPRINT_KEY: f"{f.fingerprint}:{occurrence}"},
    }
    if f.cell:
        out["properties"] = {"cell": f.cell, "cellRegion": region}
    if index is not None:
        out["ruleIndex"] = index
    if f.context:
        out["locations"][0]["logicalLocations"] = [{"fullyQualifiedName": f.context}]
    if f.related and not f.cell:
        artifact = physical["artifactLocation"]
        out["relatedLocations"] = [
            {"id": i, "message": {"text": r.message},
             "physicalLocation": {"artifactLocation": artifact, "region": {
                 "startLine": r.line, "startColumn": r.column, "endLine": r.end_line, "endColumn": r.end_column}}}
            for i, r in enumerate(f.related, 1)]
    if f.suppressed is not None:
        out["suppressions"] = [{"kind": "inSource", "justification": f.suppressed}]
    return out


def document(findings: list[Finding], ctx) -> dict:
    from kcheck.registry import all_rules

    cat = _catalog()
    rules = list(all_rules())
    if getattr(ctx, "sarif_rules", "all") == "fired":
        fired = {f.code for f in findings}
        rules = [r for r in rules if r.CODE in fired]
    index = {r.CODE: i for i, r in enumerate(rules)}
    seen: dict[str, int] = {}
    results = []
    for f in findings:
        seen[f.fingerprint] = seen.get(f.fingerprint, 0) + 1
        results.append(result(f, index.get(f.code), ctx, seen[f.fingerprint]))
    notes = [{
        "level": "warning",
        "message": {"text": f"{ctx.repo_path(f)}: {f.message}"},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri(ctx.repo_path(f)), "uriBaseId": "%SRCROOT%"}}}],
    } for f in ctx.not_checked]
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "kcheck",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": ctx.docs_url,
                "rules": [rule_descriptor(r, ctx.docs_url, cat) for r in rules],
            }},
            "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": notes}],
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }


def render(findings: list[Finding], ctx) -> str:
    return json.dumps(document(findings, ctx), indent=2, ensure_ascii=False) + "\n"
