"""Generate the docs site's data pages at build time (run by mkdocs-gen-files).

Everything that comes from data is built here and never committed: one page per catalog entry,
one index per topic (the hardware index carries the comparison table), one page per checker
rule, the guides from ``references/``, and the kernels page with its plots. ``generate`` is one
plain function from the repository to a list of pages; the bottom of the file hands them to
mkdocs-gen-files. Data comes only from kcheck itself: ``kcheck.catalog.load_catalog``,
``kcheck.registry.all_rules`` with ``kcheck.explain.rule_record``, the guides' Markdown and the
kernels' results files.

Site URLs (``use_directory_urls``) are fixed because ``kcheck`` prints them: ``rules/<name>/``,
``catalog/<topic>/<slug>/``, ``catalog/<topic>/``, ``guides/<stem>/`` and ``kernels/``.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import posixpath
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Labels of the hardware facts that the comparison table lines up (by the fact's ``key``).
HARDWARE_KEYS = {
    "sm-count": "SMs",
    "hbm-capacity": "HBM capacity",
    "hbm-bandwidth": "HBM bandwidth",
    "l2-size": "L2 cache",
    "smem-per-sm": "Shared memory per SM",
    "bf16-dense-tflops": "BF16 dense tensor",
    "fp8-dense-tflops": "FP8 dense tensor",
    "fp4-dense-tflops": "FP4 dense tensor",
    "tdp": "Board power",
    "nvlink-bandwidth": "NVLink bandwidth",
}
SEVERITY_ICON = {"error": ":material-close-octagon:", "warning": ":material-alert:", "info": ":material-information:"}
PEER_ORDER = ("kcheck", "torch", "torch.compile", "liger")
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")


@dataclass(frozen=True)
class Page:
    """One generated file: its path under ``docs/``, its content, and the repository file its
    edit link opens (``None`` for no edit link)."""

    path: str
    content: str | bytes
    edit: str | None = None


# --------------------------------------------------------------------------- Markdown helpers


def _cell(text: object) -> str:
    """Text for one table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _rel(src: str, dest: str) -> str:
    """A link from the page at ``src`` to the page (or file) at ``dest``, both under docs/."""
    target, _, anchor = dest.partition("#")
    link = posixpath.relpath(target, posixpath.dirname(src) or ".")
    return link + (f"#{anchor}" if anchor else "")


def _indent(text: str, by: str = "    ") -> str:
    return "\n".join(by + line if line.strip() else "" for line in text.splitlines())


def entry_page(entry_id: str) -> str:
    return f"catalog/{entry_id}.md"


def rule_page(name: str) -> str:
    return f"rules/{name}.md"


def _entry_link(src: str, catalog, entry_id: str) -> str:
    title = catalog.entries.get(entry_id, {}).get("title", entry_id)
    return f"[{title}]({_rel(src, entry_page(entry_id))}) `{entry_id}`"


def _value(fact: dict) -> str:
    if "value" not in fact:
        return ""
    value = fact["value"]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= 1000:
        value = f"{value:,}"
    return f"{value} {fact.get('unit', '')}".strip()


# --------------------------------------------------------------------------- the catalog


def _evidence(src: str, catalog, fact: dict) -> str:
    kind = fact.get("evidence")
    if kind == "cited":
        source = catalog.sources.get(fact.get("source"), {})
        url = source.get("url") or (
            f"https://github.com/{source['repo']}/blob/{source['commit']}/{source['path']}" if source.get("repo") else ""
        )
        title = _cell(source.get("title", fact.get("source")))
        where = f"[{title}]({url})" if url else title
        return f"{where}, {_cell(fact.get('locator', ''))}".rstrip(", ")
    if kind == "derived":
        parts = []
        for ref in fact.get("inputs", []):
            entry_id, _, key = str(ref).partition("#")
            if entry_id in catalog.entries:
                parts.append(f"[`{ref}`]({_rel(src, entry_page(entry_id))})")
            else:
                parts.append(f"`{ref}`")
        return "derived from " + ", ".join(parts)
    if kind == "measured":
        return f"measured: `{fact.get('results')}` (`{fact.get('field')}`), see [kernels]({_rel(src, 'kernels/index.md')})"
    return _cell(kind)


def _entry_markdown(catalog, entry_id: str, cited_by: list[dict], kernels: list[str]) -> str:
    entry = catalog.entries[entry_id]
    src = entry_page(entry_id)
    topic = catalog.topics.get(entry.get("topic"), {})
    topic_index = f"catalog/{entry.get('topic')}/index.md"
    out = [
        "---",
        f"description: {json.dumps(' '.join(str(entry.get('summary', '')).split()))}",
        "---",
        "",
        f"# {entry['title']}",
        "",
        f'<div class="kc-meta" markdown>`{entry_id}` · {entry.get("kind")} · '
        f'[{topic.get("title", entry.get("topic"))}]({_rel(src, topic_index)}) · '
        f"reviewed {entry.get('last_reviewed')}</div>",
        "",
        " ".join(str(entry.get("summary", "")).split()),
        "",
    ]
    applies = entry.get("applies_to") or {}
    if applies:
        axes = [f"{axis} {' '.join(f'`{v}`' for v in values)}" for axis, values in applies.items()]
        out += [f"**Applies to:** {' · '.join(axes)}", ""]
    if cited_by:
        codes = ", ".join(f"[{r['code']}]({_rel(src, rule_page(r['name']))})" for r in cited_by)
        out += [f'!!! example "Checked by kcheck: {", ".join(r["code"] for r in cited_by)}"', "",
                f"    {'Rule' if len(cited_by) == 1 else 'Rules'} {codes} {'cites' if len(cited_by) == 1 else 'cite'} "
                "this entry; their findings link here.", ""]
    body = catalog.bodies.get(entry_id)
    if body:
        out += [body.strip(), ""]
    out += ["## Facts", "", "| Fact | Value | Evidence |", "|---|---|---|"]
    for fact in entry.get("facts", []):
        statement = _cell(fact.get("statement", ""))
        if fact.get("conditions"):
            statement += f" <br><small>Conditions: {_cell(fact['conditions'])}</small>"
        if fact.get("archs"):
            statement += f" <br><small>Specific to: {', '.join(fact['archs'])}</small>"
        out.append(f"| {statement} | {_cell(_value(fact))} | {_evidence(src, catalog, fact)} |")
    out.append("")
    for name, heading in (("guidance", "Guidance"), ("signals", "Signals"), ("verify", "Verify")):
        if name == "signals" and entry.get("pitfalls"):
            out += ["## Pitfalls", ""]
            for item in entry["pitfalls"]:
                out += ['!!! warning "Pitfall"', "", _indent(" ".join(str(item).split())), ""]
        if entry.get(name):
            out += [f"## {heading}", ""] + [f"- {' '.join(str(i).split())}" for i in entry[name]] + [""]
    if cited_by:
        out += ["## Rules that cite it", "", "| Code | Rule | Severity |", "|---|---|---|"]
        out += [f"| {r['code']} | [{r['name']}]({_rel(src, rule_page(r['name']))}) | {r['severity']} |"
                for r in cited_by]
        out.append("")
    if kernels:
        out += ["## Kernels that implement it", ""]
        out += [f"- [`{op}`]({_rel(src, 'kernels/index.md#' + op)})" for op in kernels]
        out.append("")
    if entry.get("related"):
        out += ["## Related entries", ""]
        out += [f"- {_entry_link(src, catalog, rid)}" for rid in entry["related"]]
        out.append("")
    if entry.get("sources"):
        out += ["## Sources", ""]
        for sid in entry["sources"]:
            source = catalog.sources.get(sid, {})
            url = source.get("url") or (
                f"https://github.com/{source['repo']}/blob/{source['commit']}/{source['path']}"
                if source.get("repo") else "")
            title = source.get("title", sid)
            who = f" — {source['authors']}" if source.get("authors") else ""
            out.append(f"- {f'[{title}]({url})' if url else title}{who} ({source.get('kind')}, read "
                       f"{source.get('retrieved')}) `{sid}`")
        out.append("")
    return "\n".join(out)


def _hardware_table(catalog, src: str) -> list[str]:
    """Rows = fact keys, columns = GPU entries, from facts that carry a ``key``."""
    gpus = [
        (eid, e) for eid, e in sorted(catalog.entries.items())
        if e.get("topic") == "hardware" and e.get("kind") == "hardware-fact"
        and sum(1 for f in e.get("facts", []) if f.get("key") in HARDWARE_KEYS) >= 3
    ]
    if not gpus:
        return []
    facts = {eid: {f["key"]: f for f in e.get("facts", []) if f.get("key")} for eid, e in gpus}
    keys = [k for k in HARDWARE_KEYS if any(k in facts[eid] for eid, _ in gpus)]
    out = ["## Hardware comparison", "",
           "Datasheet and guide figures from each part's entry; follow a column's link for the evidence "
           "behind every number. Measure before you divide by any of them.", "",
           "| | " + " | ".join(f"[{eid.split('/')[1].replace('-', ' ').upper()}]({_rel(src, entry_page(eid))})"
                               for eid, _ in gpus) + " |",
           "|---|" + "---:|" * len(gpus)]
    for key in keys:
        cells = [_cell(_value(facts[eid][key])) if key in facts[eid] else "—" for eid, _ in gpus]
        out.append(f"| {HARDWARE_KEYS[key]} | " + " | ".join(cells) + " |")
    out += ["", "A dash means the part's entry states no such figure. Words instead of a number (not "
            "published, no primary figure) mean the entry has a fact saying why no figure is quoted. Figures "
            "its entry marks source-reported were read in a copy of the vendor's table or in a third-party "
            "review, not in the vendor's own page.", ""]
    return out


def _catalog_pages(catalog, rules_by_entry: dict, kernels_by_entry: dict) -> list[Page]:
    pages: list[Page] = []
    by_topic: dict[str, list[str]] = defaultdict(list)
    for entry_id, entry in catalog.entries.items():
        by_topic[entry.get("topic", entry_id.split("/")[0])].append(entry_id)
    title_of = lambda eid: str(catalog.entries[eid].get("title", eid)).lower()  # noqa: E731
    for topic_entries in by_topic.values():
        topic_entries.sort(key=title_of)

    index = ["# Catalog", "",
             f"{len(catalog.entries)} entries in {len(catalog.topics)} topics, each a page with its facts "
             "(every number with its evidence), guidance, pitfalls, what you see in a profile, and how to "
             "verify it on your own machine. Search (++slash++) finds entries by id, e.g. "
             "`measuring/l2-flushing`.", "", '<div class="grid cards" markdown>', ""]
    summary = ["- [Overview](index.md)"]
    for topic_id, topic in catalog.topics.items():
        entries = by_topic.get(topic_id, [])
        index += [f"-   **[{topic.get('title', topic_id)}]({topic_id}/index.md)** · {len(entries)}", "",
                  "    ---", "", f"    {_cell(topic.get('description', ''))}", ""]
        summary.append(f"- [{topic.get('title', topic_id)}]({topic_id}/index.md)")
        summary += [f"    - [{catalog.entries[eid].get('title', eid)}]({eid}.md)" for eid in entries]
        src = f"catalog/{topic_id}/index.md"
        text = [f"# {topic.get('title', topic_id)}", "", _cell(topic.get("description", "")), ""]
        if topic_id == "hardware":
            text += _hardware_table(catalog, src)
        if entries:
            text += ["## Entries", "", "| Entry | Kind | Summary |", "|---|---|---|"]
            for eid in entries:
                entry = catalog.entries[eid]
                summary_line = _cell(entry.get("summary", ""))
                first = summary_line.split(". ")[0].rstrip(".") + "."
                text.append(f"| [{_cell(entry.get('title', eid))}]({_rel(src, entry_page(eid))})<br>`{eid}` "
                            f"| {entry.get('kind')} | {first} |")
        else:
            text += ['!!! note "No entries yet"', "", "    This topic has no entries yet; see "
                     f"[contributing]({_rel(src, 'contributing.md')}) to add one."]
        pages.append(Page(src, "\n".join(text) + "\n", "knowledge/index.yaml"))
    index += ["</div>", ""]
    pages.append(Page("catalog/index.md", "\n".join(index), "knowledge/index.yaml"))
    pages.append(Page("catalog/SUMMARY.md", "\n".join(summary) + "\n"))
    for entry_id in catalog.entries:
        pages.append(Page(entry_page(entry_id),
                          _entry_markdown(catalog, entry_id, rules_by_entry.get(entry_id, []),
                                          kernels_by_entry.get(entry_id, [])),
                          catalog.files[entry_id].relative_to(REPO).as_posix()
                          if catalog.files[entry_id].is_relative_to(REPO) else None))
    return pages


# --------------------------------------------------------------------------- rules


def _config_keys() -> dict[str, dict]:
    from kcheck.paths import data_dir

    schema = json.loads((data_dir("schemas") / "config.schema.json").read_text(encoding="utf-8"))
    return schema.get("properties", {})


EVALUATION = REPO / "benchmarks" / "results" / "evaluation-test.json"


@functools.lru_cache(maxsize=1)
def _evaluation() -> dict | None:
    return json.loads(EVALUATION.read_text(encoding="utf-8")) if EVALUATION.exists() else None


def _measured(code: str) -> list[str]:
    """The rule's precision and recall on the yardstick's test split (benchmarks/evaluate.py)."""
    data = _evaluation()
    if data is None or code.startswith("KC9"):
        return []  # meta rules judge files and suppressions, not kernel code
    rule = data["rules"].get(code)

    def share(r: dict) -> str:
        if not r["n"]:
            return "not measured (no labels)"
        return f"{100 * r['value']:.0f}% ({100 * r['low']:.0f}–{100 * r['high']:.0f}%, {r['k']} of {r['n']})"

    out = ["## Measured", ""]
    if rule is None:
        out += ["No finding and no label on the test split yet: not measured, so the rule is a preview.", ""]
        return out
    out += [f"On the yardstick's test split (real public trees kcheck was not tuned on; kcheck "
            f"{data['meta']['commit']}, {data['meta']['date']}), Wilson 95% intervals:", "",
            "| | |", "|---|---|",
            f"| findings | {rule['findings']} |",
            f"| precision (judged findings) | {share(rule['precision'])} |",
            f"| recall (labelled real instances) | {share(rule['recall'])} |",
            f"| status | {rule['status']} |", "",
            "How it is measured: `benchmarks/README.md` in the repository.", ""]
    return out


def _rule_markdown(record: dict, catalog, config_keys: dict) -> str:
    src = rule_page(record["name"])
    docs = dict(record["docs"])
    summary = docs.pop("summary", "")
    out = [
        "---",
        f"description: {json.dumps(record['code'] + ' ' + summary)}",
        "---",
        "",
        f"# {record['code']} {record['name']}",
        "",
        f'<div class="kc-meta" markdown>{SEVERITY_ICON.get(record["severity"], "")} '
        f'<span class="kc-severity kc-{record["severity"]}">{record["severity"]}</span> · '
        f'[{record["family"]}]({_rel(src, "rules/index.md")}#{record["code"][:3].lower()}xx) · '
        f"default severity, change it with `severity` in [configuration]({_rel(src, 'configuration.md')})</div>",
        "",
        summary,
        "",
        *(['!!! warning "Preview"', "",
           "    This rule is a preview: its precision is not yet measured well enough for it to be on by "
           "default, so kcheck runs it only when asked, with `--preview` on the command line, "
           f"`preview = true` in [configuration]({_rel(src, 'configuration.md')}), or by naming "
           f"`{record['code']}` or `{record['name']}` in `select` or `extend-select` (a prefix such as "
           f"`{record['code'][:3]}` or `ALL` does not turn it on).", ""] if record.get("preview") else []),
        '!!! quote "Message"',
        "",
        "    " + re.sub(r"[{]([a-z_]+)[}]", r"‹\1›", _cell(record["message"])),  # placeholders filled per finding
        "",
    ]
    for heading, text in docs.items():
        if heading == "Options" and record["options"]:
            continue  # the options table below says it with the schema's words
        out += [f"## {heading}", "", text, ""]
    if record["options"]:
        out += ["## Options", "", "Set in `[tool.kcheck]` (see [configuration]"
                f"({_rel(src, 'configuration.md')})):", "", "| Key | What it does |", "|---|---|"]
        for key in record["options"]:
            out.append(f"| `{key}` | {_cell(config_keys.get(key, {}).get('description', ''))} |")
        out.append("")
    if record["knowledge"]:
        out += ["## Catalog entries", "", "Why the rule exists, with the evidence:", ""]
        for entry_id in record["knowledge"]:
            entry = catalog.entries.get(entry_id)
            if entry:
                out.append(f"- {_entry_link(src, catalog, entry_id)}: {_cell(entry.get('summary', '')).split('. ')[0].rstrip('.')}.")
            else:
                out.append(f"- `{entry_id}` (not in the catalog)")
        out.append("")
    if record["invalid"] or record["valid"]:
        out += ["## Tested examples", "",
                "These run as tests: kcheck must flag every *flagged* example and stay silent on every *clean* one.", ""]
        for label, examples in (("Flagged", record["invalid"]), ("Clean", record["valid"])):
            for n, code in enumerate(examples, 1):
                out += [f'=== "{label} {n}"', "", "    ```python", _indent(code), "    ```", ""]
    out += _measured(record["code"])
    out += ["## Suppressing it", "", "```python",
            f"...  # kcheck: ignore[{record['code']}] <why this one is fine>", "```", ""]
    return "\n".join(out)


def _rules_pages(records: list[dict], catalog, config_keys: dict) -> list[Page]:
    from kcheck.registry import FAMILIES

    pages: list[Page] = []
    index = ["# Rules", "",
             f"kcheck has {len(records)} rules. Every finding prints the URL of its rule's page, and every "
             "page links to the catalog entries that explain the rule. Print one in the terminal with "
             "`kcheck rule KC201` or `kcheck rule host-sync-in-timed-region`.", ""]
    summary = ["- [All rules](index.md)"]
    for prefix, (_, family) in FAMILIES.items():
        members = [r for r in records if r["code"].startswith(prefix)]
        index += [f"## {prefix}xx: {family} {{#{prefix.lower()}xx}}", ""]
        if not members:
            index += ["No rules in this family yet.", ""]
            continue
        index += ["| Code | Rule | Severity | What it finds |", "|---|---|---|---|"]
        summary.append(f"- {prefix}xx {family}")
        for r in members:
            index.append(f"| {r['code']} | [{r['name']}]({r['name']}.md){' (preview)' if r.get('preview') else ''} | {r['severity']} "
                         f"| {_cell(r['docs'].get('summary', ''))} |")
            summary.append(f"    - [{r['code']} {r['name']}]({r['name']}.md)")
        index.append("")
    pages.append(Page("rules/index.md", "\n".join(index)))
    pages.append(Page("rules/SUMMARY.md", "\n".join(summary) + "\n"))
    for r in records:
        module = r["module"].removeprefix("kcheck.").replace(".", "/")
        pages.append(Page(rule_page(r["name"]), _rule_markdown(r, catalog, config_keys), f"checker/{module}.py"))
    return pages


# --------------------------------------------------------------------------- guides


def _rewrite_links(text: str, src: str, repo_file: str, known: set[str]) -> str:
    """Make a guide's links work on the site.

    A relative link is resolved against the guide's page URL (``guides/<stem>/``); if it names a
    page of the site it becomes a link to that page's Markdown file (which mkdocs checks). Failing
    that it is resolved against the guide's place in the repository and, if it names a file
    there, becomes a link to that file on GitHub. Anything else is left for mkdocs to report.
    """
    page_url = posixpath.splitext(src)[0] + "/"

    def fix(match: re.Match) -> str:
        target = match["target"]
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
            return match[0]
        path, _, anchor = target.partition("#")
        hashed = f"#{anchor}" if anchor else ""
        candidates = []
        if not path.endswith(".md"):
            site = posixpath.normpath(posixpath.join(page_url, path)).strip("/")
            candidates += [f"{site}.md", f"{site}/index.md"]
        candidates.append(posixpath.normpath(posixpath.join(posixpath.dirname(src), path)))
        for candidate in candidates:
            if candidate in known:
                return f"[{match['text']}]({_rel(src, candidate)}{hashed}){match['title'] or ''}"
        in_repo = posixpath.normpath(posixpath.join(posixpath.dirname(repo_file), path))
        if path and (REPO / in_repo).exists():
            return f"[{match['text']}](https://github.com/kcheck/kcheck/blob/main/{in_repo}{hashed})"
        return match[0]

    return _LINK.sub(fix, text)


def _guide_sources(references: Path) -> list[tuple[str, Path]]:
    found = [(p.stem, p) for p in sorted(references.glob("*.md")) if p.stem.lower() != "readme"]
    checklist = references / "templates" / "review-checklist.md"
    if checklist.is_file():
        found.append(("review-checklist", checklist))
    return found


def _guide_title(text: str, stem: str) -> str:
    match = re.search(r"^#\s+(.+)$", text, re.M)
    return match.group(1).strip() if match else stem.replace("-", " ").capitalize()


def _guides_pages(references: Path, known: set[str]) -> list[Page]:
    guides = _guide_sources(references)
    pages: list[Page] = []
    index = ["# Guides", "",
             "Step by step from a measured hotspot to a change you can keep or reject. Each guide has the "
             "same sections and links into the catalog and the rules.", ""]
    summary = ["- [All guides](index.md)"]
    if not guides:
        index += ['!!! note "No guides yet"', "", "    The guides live in `references/` and appear here when they land."]
    for stem, path in guides:
        text = path.read_text(encoding="utf-8")
        title = _guide_title(text, stem)
        src = f"guides/{stem}.md"
        repo_file = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
        if not re.search(r"^#\s+", text, re.M):
            text = f"# {title}\n\n{text}"
        pages.append(Page(src, _rewrite_links(text, src, repo_file, known), repo_file))
        index.append(f"- [{title}]({stem}.md)")
        summary.append(f"- [{title}]({stem}.md)")
    pages.append(Page("guides/index.md", "\n".join(index) + "\n"))
    pages.append(Page("guides/SUMMARY.md", "\n".join(summary) + "\n"))
    return pages


# --------------------------------------------------------------------------- kernels


def _kernel_modules() -> dict[str, str]:
    """Each reference kernel's module docstring, read with ``ast`` (torch is never imported)."""
    from kcheck.kernels import OPS

    out = {}
    for op in OPS:
        path = REPO / "kernels" / f"{op}.py"
        if path.is_file():
            out[op] = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return out


def _kernels_by_entry(catalog, modules: dict[str, str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for op, doc in modules.items():
        for entry_id in dict.fromkeys(re.findall(r"\b[a-z0-9-]+/[a-z0-9-]+\b", doc)):
            if entry_id in catalog.entries:
                found[entry_id].append(op)
    return found


def _plot(result: dict, op: str) -> bytes:
    """Achieved GB/s against tokens per implementation and dtype, with the copy and datasheet
    ceilings as lines: one SVG, rendered deterministically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result.get("rows", []) if r.get("op") == op]
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    with plt.rc_context({"svg.hashsalt": "kcheck", "font.size": 9, "axes.spines.top": False,
                         "axes.spines.right": False}):
        fig, axes = plt.subplots(1, len(dtypes), figsize=(5.6 * len(dtypes) + 0.6, 3.4), squeeze=False,
                                 sharey=True)
        ceilings = result.get("ceilings", {})
        for ax, dtype in zip(axes[0], dtypes):
            impls = sorted({r["impl"] for r in rows if r["dtype"] == dtype},
                           key=lambda i: (PEER_ORDER.index(i) if i in PEER_ORDER else len(PEER_ORDER), i))
            for impl in impls:
                points = sorted((r["tokens"], r["gbps"]) for r in rows if r["dtype"] == dtype and r["impl"] == impl)
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                        linewidth=2.2 if impl == "kcheck" else 1.2, label=impl)
            for key, label, style in (("copy_gbps", "measured copy", "--"), ("datasheet_gbps", "datasheet", ":")):
                if ceilings.get(key):
                    ax.axhline(ceilings[key], color="0.35", linestyle=style, linewidth=1)
                    ax.annotate(f"{label} {ceilings[key]:,.0f}", (0.01, ceilings[key]), xycoords=("axes fraction", "data"),
                                va="bottom", fontsize=7, color="0.35")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tokens")
            ax.set_title(f"{op} · {dtype}", fontsize=9)
            ax.grid(True, which="major", alpha=0.3)
        axes[0][0].set_ylabel("achieved GB/s")
        axes[0][0].set_ylim(bottom=0)
        axes[0][-1].legend(fontsize=7, frameon=False, loc="lower right")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    return buf.getvalue()


def _pct(value) -> str:
    """A fraction as a percentage, rounded down (``kcheck.kernels.rounded_down``)."""
    from kcheck.kernels import rounded_down
    if not isinstance(value, (int, float)):
        return "—"
    return f"{rounded_down(100 * value, 1)}%"


def _results_table(rows: list[dict], other_rows: list[dict] = ()) -> list[str]:
    """One line per dtype and token count: kcheck's time, bandwidth and fractions of the ceilings,
    each peer's time, and the best peer's time over kcheck's (above 1: kcheck is faster). Then, for
    the results file's ``other_rows`` (implementations that do less than the op, such as the fused
    FP8 ops' same-pattern movers), one column each: its time and kcheck's speed as a fraction of
    its speed; never the best peer."""
    from kcheck.kernels import rounded_down
    peers = sorted({r["impl"] for r in rows} - {"kcheck"},
                   key=lambda i: (PEER_ORDER.index(i) if i in PEER_ORDER else len(PEER_ORDER), i))
    others = sorted({r["impl"] for r in other_rows})
    grid: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        grid[(r["dtype"], r["tokens"])][r["impl"]] = r
    beside: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in other_rows:
        beside[(r["dtype"], r["tokens"])][r["impl"]] = r
    out = ["| dtype | tokens | kcheck µs | GB/s | of copy | of datasheet | "
           + " | ".join(f"{p} µs" for p in peers) + " | best peer ÷ kcheck |"
           + "".join(f" {o} µs (not the same op; its µs ÷ kcheck µs) |" for o in others),
           "|---|---:|---:|---:|---:|---:|" + "---:|" * len(peers) + "---:|" + "---:|" * len(others)]
    for (dtype, tokens), by_impl in sorted(grid.items()):
        own = by_impl.get("kcheck")
        cells = [dtype, str(tokens)]
        cells += ([f"**{own['median_us']:.2f}**", f"{own['gbps']:,.0f}", _pct(own.get("frac_copy")),
                   _pct(own.get("frac_datasheet"))] if own else ["—"] * 4)
        cells += [f"{by_impl[p]['median_us']:.2f}" if p in by_impl else "—" for p in peers]
        times = [by_impl[p]["median_us"] for p in peers if p in by_impl]
        cells.append(f"{rounded_down(min(times) / own['median_us'], 2)}×" if own and times and own["median_us"] else "—")
        for o in others:
            r = beside[(dtype, tokens)].get(o)
            cells.append(f"{r['median_us']:.2f} ({rounded_down(r['median_us'] / own['median_us'], 2)}×)"
                         if r and own and own["median_us"] else (f"{r['median_us']:.2f}" if r else "—"))
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


def _ceiling_share(row: dict | None, named: bool = False) -> str:
    """A ceilings row as a share of the datasheet, with the mover's name (``triton2048-w8``) if asked."""
    if row is None:
        return "—"
    mover = row["case"].split("same-traffic ")[-1].split(" ", 1)
    return _pct(row["frac_datasheet"]) + (f" ({mover[1]})" if named and len(mover) == 2 else "")


def _ceilings_section(folder: Path) -> list[str]:
    """One table per file of ``benchmarks/kernels_ceiling.py`` output in ``folder``: each kernel next
    to the fastest kernels that move its bytes in its read:write mix, as fractions of the datasheet."""
    out: list[str] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            rows = {r["case"]: r for r in data["rows"]}
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a kernels_ceiling.py results file: {exc!r}") from None
        kernels = [r for c, r in rows.items() if " same-traffic" not in c and not c.startswith("copy ")]
        if not kernels:
            continue
        out += [f"### Ceilings at each kernel's size: `{path.name}` {{#ceilings-{path.stem}}}", "",
                f"{_cell(data.get('gpu'))}, {str(data.get('date', ''))[:10]}, kcheck `{str(data.get('kcheck_commit') or '')[:10]}`. "
                "Each kernel is timed next to kernels that move the same bytes in the same read:write mix, "
                "in the same run with the same timer ([`benchmarks/kernels_ceiling.py`]"
                "(https://github.com/kcheck/kcheck/blob/main/benchmarks/kernels_ceiling.py)): what a kernel of that "
                "size and access pattern can be held to. A *copy* moves one array into another, a *pair copy* "
                "two into two, an *in-place swap* reads two arrays and overwrites the lines it read. "
                "Fractions of the datasheet bandwidth.", "",
                "| Op | Bytes | Kernel | Same-traffic torch op | Fastest copy | Fastest pair copy | Fastest in-place swap |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for k in kernels:
            plain, movers = None, {}  # the same-traffic torch op; the other movers by kind: copy, pair, swap
            for case, row in rows.items():
                if case.startswith(k["case"] + " same-traffic "):
                    name = case.split("same-traffic ")[-1].split(" ", 1)
                    if len(name) == 1:
                        plain = row
                    else:
                        kind = re.match(r"[a-z]*", name[1]).group()
                        movers.setdefault("copy" if kind in ("mul", "triton") else kind, []).append(row)
            fastest = {kind: max(group, key=lambda r: r["gbps"]) for kind, group in movers.items()}
            out.append(f"| {_cell(k['case'])} | {k['bytes'] / 1e6:,.0f} MB | {_ceiling_share(k)} | {_ceiling_share(plain)} | "
                       + " | ".join(_ceiling_share(fastest.get(kind), True) for kind in ("copy", "pair", "swap")) + " |")
        out.append("")
    return out


def _kernels_pages(results_dir: Path, modules: dict[str, str], catalog) -> list[Page]:
    src = "kernels/index.md"
    results = []
    for path in sorted(results_dir.glob("*.json")) if results_dir.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{path}: not a kernels results file: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise ValueError(f"{path}: not a kernels results file: expected an object with 'rows'")
        results.append((path.stem, data))
    pages: list[Page] = []
    out = ["---", "hide:", "  - navigation", "---", "", "# Reference kernels", "",
           "Triton kernels for the serving ops the catalog discusses, written the way the catalog says: "
           "fp32 accumulation, masked tails, int64 offsets, declared and announced fallbacks. One harness "
           "verifies each against an upcast torch reference (fresh random inputs, poisoned outputs, NaN "
           "never passes, CUDA-graph replay) and times it as the median of device events with the L2 "
           "flushed, against torch eager, `torch.compile` and other peers when installed.", "",
           "```bash", "python -m kcheck.kernels all --out kernels/results/<gpu>.json", "```", ""]
    if results:
        out += ["## Machines", "",
                "Each results file records where and when it ran; *copy* is the device-to-device copy "
                "bandwidth measured on that machine, the ceiling a memory-bound kernel is judged against.", "",
                "| Results | GPU (driver) | torch · Triton · CUDA | Copy | Datasheet | Run |",
                "|---|---|---|---:|---:|---|"]
        for stem, data in results:
            c = data.get("ceilings", {})
            commit = str(data.get("kcheck_commit") or "")[:10]
            out.append(f"| [`{stem}.json`](https://github.com/kcheck/kcheck/blob/main/kernels/results/{stem}.json) "
                       f"| {_cell(data.get('gpu'))} ({data.get('driver') or '—'}) "
                       f"| {data.get('torch')} · {data.get('triton')} · {data.get('cuda') or '—'} "
                       f"| {c.get('copy_gbps', 0) or 0:,.0f} GB/s | {c.get('datasheet_gbps', 0) or 0:,.0f} GB/s "
                       f"| {str(data.get('date', ''))[:10]} `{commit}` |")
        out.append("")
        out += _ceilings_section(results_dir / "ceilings")
    else:
        out += ['!!! note "No results yet"', "",
                "    Results files (`kernels/results/<gpu>.json`) are written by the harness on a GPU "
                "and drawn here at build time.", ""]
    for op, doc in modules.items():
        lines = doc.strip().splitlines()
        out += [f"## `{op}` {{#{op}}}", "", lines[0] if lines else "", ""]
        cited = [eid for eid in dict.fromkeys(re.findall(r"\b[a-z0-9-]+/[a-z0-9-]+\b", doc)) if eid in catalog.entries]
        if cited:
            out += ["Catalog: " + ", ".join(f"[`{eid}`]({_rel(src, entry_page(eid))})" for eid in cited), ""]
        out += [f"Source: [`kernels/{op}.py`](https://github.com/kcheck/kcheck/blob/main/kernels/{op}.py)", ""]
        for stem, data in results:
            rows = [r for r in data["rows"] if r.get("op") == op]
            checks = [v for v in data.get("verify", []) if v.get("op") == op]
            if not rows and not checks:
                continue
            out += [f"### `{op}` on {_cell(data.get('gpu'))} {{#{op}-{stem}}}", ""]
            if checks:
                passed = sum(1 for v in checks if v.get("passed"))
                failed = [v for v in checks if not v.get("passed")]
                kind = "success" if not failed else "failure"
                out += [f'!!! {kind} "Verification: {passed} of {len(checks)} checks passed"', ""]
                for v in failed:
                    out.append(f"    - {v.get('dtype')} `{v.get('case')}` ({_cell(v.get('reason', ''))}): "
                               f"rel err {v.get('rel_err')}, max abs err {v.get('max_abs_err')}")
                out.append("")
            if rows:
                plot = f"kernels/plots/{stem}-{op}.svg"
                pages.append(Page(plot, _plot(data, op)))
                out += [f"![Achieved bandwidth of {op} on {_cell(data.get('gpu'))}]({_rel(src, plot)})", ""]
                out += _results_table(rows, [r for r in data.get("other_rows", []) if r.get("op") == op])
    pages.append(Page(src, "\n".join(out) + "\n"))
    return pages


# --------------------------------------------------------------------------- configuration


def _configuration_page(docs_dir: Path, config_keys: dict) -> Page:
    """The hand-written configuration page with its key table filled in from the schema."""
    marker = "<!-- kcheck:config-keys -->"
    text = (docs_dir / "configuration.md").read_text(encoding="utf-8")
    table = ["| Key | Type | What it does |", "|---|---|---|"]
    for key, spec in config_keys.items():
        kind = spec.get("type") or ("list of rule selectors" if "selectors" in spec.get("$ref", "")
                                    else "list of globs" if "globs" in spec.get("$ref", "")
                                    else "severity" if "severity" in spec.get("$ref", "") else "")
        if kind == "array":
            kind = "list of strings"
        elif kind == "object":
            kind = "table"
        table.append(f"| `{key}` {{#{key}}} | {kind} | {_cell(spec.get('description', ''))} |")
    return Page("configuration.md", text.replace(marker, "\n".join(table)), "docs/configuration.md")


# --------------------------------------------------------------------------- all together


def generate(repo: Path = REPO, results: Path | None = None) -> list[Page]:
    """Every generated page of the site, from the catalog, the rules, the guides and the results
    files (``kernels/results/*.json`` unless ``results`` names another folder)."""
    from kcheck.catalog import load_catalog
    from kcheck.explain import rule_record
    from kcheck.registry import all_rules

    catalog = load_catalog(repo / "knowledge")
    records = [rule_record(rule) for rule in all_rules()]
    config_keys = _config_keys()
    rules_by_entry: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        for entry_id in record["knowledge"]:
            rules_by_entry[entry_id].append(record)
    modules = _kernel_modules()
    pages = _catalog_pages(catalog, rules_by_entry, _kernels_by_entry(catalog, modules))
    pages += _rules_pages(records, catalog, config_keys)
    pages += _kernels_pages(results or repo / "kernels" / "results", modules, catalog)
    pages.append(_configuration_page(repo / "docs", config_keys))
    known = {p.path for p in pages if p.path.endswith(".md")}
    known |= {p.relative_to(repo / "docs").as_posix() for p in (repo / "docs").rglob("*.md")}
    known |= {f"guides/{stem}.md" for stem, _ in _guide_sources(repo / "references")} | {"guides/index.md"}
    pages += _guides_pages(repo / "references", known)
    return pages


def main() -> None:
    import mkdocs_gen_files
    from mkdocs.structure.files import InclusionLevel

    editor = mkdocs_gen_files.FilesEditor.current()
    for page in generate():
        mode = "wb" if isinstance(page.content, bytes) else "w"
        with mkdocs_gen_files.open(page.path, mode) as handle:
            handle.write(page.content)
        if page.path.endswith("SUMMARY.md"):  # literate-nav reads it; it is not a page itself
            editor.files.get_file_from_path(page.path).inclusion = InclusionLevel.EXCLUDED
        if page.edit:
            # edit_uri points at docs/; the edit path is relative to it.
            edit = page.edit.removeprefix("docs/") if page.edit.startswith("docs/") else f"../{page.edit}"
            mkdocs_gen_files.set_edit_path(page.path, edit)


if __name__ in ("__main__", "<run_path>"):
    main()
