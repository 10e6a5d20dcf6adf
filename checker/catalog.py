"""The knowledge catalog: load it, validate it, search it, and print it.

The catalog is a folder (``knowledge/``) with ``index.yaml`` (the topics), ``sources.yaml``
(the provenance registry) and one YAML record per entry at ``<topic>/<slug>.yaml``, id
``<topic>/<slug>``, optionally with a Markdown body at ``<topic>/<slug>.md``.

Validation has two passes and reports every problem of both in one run:

1. JSON Schema (``schemas/entry.schema.json``, ``sources.schema.json``, ``index.schema.json``)
   checks the shape of each file;
2. the integrity pass checks what a schema cannot: ids match their paths and are unique, every
   reference (``related``, ``sources``, a fact's ``source``, a derived fact's ``inputs``) resolves,
   every source is used, measured numbers match the results file they cite, and every
   ``KNOWLEDGE`` id of a checker rule exists.

Each problem names the file, the line (found through ``yaml.compose`` nodes) and the field.

Importing this module is cheap: yaml, jsonschema and click's commands do their work lazily.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import click

from kcheck.finding import DEFAULT_DOCS_URL, entry_url  # the one place docs URLs are built

SCHEMA_FILES = {
    "entry": "entry.schema.json",
    "sources": "sources.schema.json",
    "index": "index.schema.json",
}
INDEX_FILE = "index.yaml"
MEASURED_TOLERANCE = 0.03  # relative; medians of device timings move about 1% between runs
SOURCES_FILE = "sources.yaml"
_FACT_REF = re.compile(r"^(?P<id>[a-z0-9-]+/[a-z0-9-]+)#(?P<key>[a-z0-9-]+)$")
# The SM100 family (B200, GB200, B300): an entry that applies to one of these tags must have a fact
# marked with one in its own `archs`, so an sm100 tag never stands on Hopper facts alone.
_SM100_TAG = re.compile(r"^sm10[0-9]a?$")
# A number standing alone in prose: 132, 3.35, 151,936, 1e-6, 1.43x. Digits inside names (H100, fp8,
# Llama-3) and hyphenated ranges or compounds (80-90%, 32-bit) are not taken as claims.
_NUMBER = re.compile(r"(?<![\w.\-])\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?(?!(?!x\b)[\w\-]|,\d)")


def _numbers(text: str) -> set[float]:
    """Numbers greater than 2 stated in ``text`` (0, 1 and 2 are too common to be claims)."""
    found = set()
    for token in _NUMBER.findall(text):
        value = float(token.replace(",", ""))
        if value > 2:
            found.add(value)
    return found


class CatalogError(Exception):
    """A catalog file that cannot be read at all (missing, or not YAML)."""


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong in the catalog, at a place in a file."""

    file: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


@dataclass
class Catalog:
    """A loaded catalog. ``entries`` and ``sources`` map ids to the YAML records as written."""

    root: Path
    entries: dict[str, dict] = field(default_factory=dict)
    sources: dict[str, dict] = field(default_factory=dict)
    topics: dict[str, dict] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    bodies: dict[str, str] = field(default_factory=dict)

    def get(self, entry_id: str) -> dict:
        try:
            return self.entries[entry_id]
        except KeyError:
            close = [i for i in self.entries if entry_id in i or i.split("/")[-1] == entry_id]
            hint = f"; did you mean {', '.join(sorted(close)[:5])}?" if close else ""
            raise KeyError(f"no catalog entry {entry_id!r}{hint}") from None

    def search(self, words: Iterable[str] | str) -> list[dict]:
        """Entries that contain every word, best first.

        A word found in the id counts most, then the title, the summary, and the rest of the
        entry (facts, guidance, pitfalls, signals, verify).
        """
        if isinstance(words, str):
            words = words.split()
        terms = [w.lower() for w in words if w.strip()]
        if not terms:
            return []
        ranked = []
        for entry_id, entry in self.entries.items():
            fields = (
                (8, entry_id.lower()),
                (4, str(entry.get("title", "")).lower()),
                (2, str(entry.get("summary", "")).lower()),
                (1, _flatten_text(entry, skip=("id", "title", "summary")).lower()),
            )
            score = 0
            for term in terms:
                hits = sum(weight * text.count(term) for weight, text in fields)
                if not hits:
                    break
                score += hits
            else:
                ranked.append((-score, entry_id))
        return [self.entries[entry_id] for _, entry_id in sorted(ranked)]


def _flatten_text(value: Any, skip: tuple[str, ...] = ()) -> str:
    if isinstance(value, dict):
        return " ".join(_flatten_text(v) for k, v in value.items() if k not in skip)
    if isinstance(value, list):
        return " ".join(_flatten_text(v) for v in value)
    return str(value)


def default_root() -> Path:
    from kcheck.paths import data_dir

    return data_dir("knowledge")


def _schema_dir() -> Path:
    from kcheck.paths import data_dir

    return data_dir("schemas")


# --------------------------------------------------------------------------- reading YAML


@dataclass
class _Document:
    """A YAML file read twice from one text: as plain data and as a node tree for line numbers."""

    path: Path
    data: Any
    node: Any


def _read_yaml(path: Path) -> _Document:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise CatalogError(f"{path}:{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    return _Document(path, _plain(data), node)


def _plain(value: Any) -> Any:
    """YAML dates become ISO strings, so the data is plain JSON for the schema."""
    import datetime

    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return value


def _line_of(node: Any, path: Iterable[Any], key_only: bool = False) -> int:
    """The 1-based line of the value at ``path`` (keys and list indexes) in a composed YAML tree.

    Walks as deep as the path exists; a missing tail resolves to the deepest node found.
    With ``key_only`` the line of the last mapping key is returned instead of its value.
    """
    import yaml

    line = node.start_mark.line + 1 if node is not None else 1
    for step in path:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.value == step:
                    line = (key_node if key_only else value_node).start_mark.line + 1
                    node = value_node
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
            node = node.value[step]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _field_name(path: Iterable[Any]) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out


# --------------------------------------------------------------------------- loading


def _entry_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*.yaml") if p.is_file())


def _load(root: Path) -> tuple[Catalog, dict[Path, _Document]]:
    if not root.is_dir():
        raise CatalogError(f"{root}: not a catalog folder")
    catalog = Catalog(root=root)
    docs: dict[Path, _Document] = {}
    for name in (INDEX_FILE, SOURCES_FILE):
        path = root / name
        if not path.is_file():
            raise CatalogError(f"{path}: missing (a catalog folder holds {INDEX_FILE} and {SOURCES_FILE})")
        docs[path] = _read_yaml(path)
    index = docs[root / INDEX_FILE].data
    for topic in (index or {}).get("topics", []) if isinstance(index, dict) else []:
        if isinstance(topic, dict) and "id" in topic:
            catalog.topics[topic["id"]] = topic
    sources = docs[root / SOURCES_FILE].data
    for source in (sources or {}).get("sources", []) if isinstance(sources, dict) else []:
        if isinstance(source, dict) and "id" in source:
            catalog.sources.setdefault(source["id"], source)
    for path in _entry_files(root):
        doc = docs[path] = _read_yaml(path)
        entry_id = f"{path.parent.name}/{path.stem}"
        if isinstance(doc.data, dict):
            catalog.entries[entry_id] = doc.data
            catalog.files[entry_id] = path
            body = path.with_suffix(".md")
            if body.is_file():
                catalog.bodies[entry_id] = body.read_text(encoding="utf-8")
    return catalog, docs


@lru_cache(maxsize=8)
def _load_cached(root: Path) -> Catalog:
    return _load(root)[0]


def load_catalog(root: Path | None = None) -> Catalog:
    """Load the catalog at ``root`` (default: the one that ships with kcheck), cached per root."""
    return _load_cached(Path(root or default_root()).resolve())


# --------------------------------------------------------------------------- validation


def _schema_validator(kind: str):
    import jsonschema

    schema = json.loads((_schema_dir() / SCHEMA_FILES[kind]).read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _schema_problems(validator, doc: _Document, rel: str) -> list[Problem]:
    problems = []
    for error in validator.iter_errors(doc.data):
        path = list(error.absolute_path)
        kind = error.validator
        if kind == "required":
            missing = [name for name in error.validator_value if name not in (error.instance or {})]
            for name in missing:
                problems.append(Problem(rel, _line_of(doc.node, path), _field_name([*path, name]),
                                        "missing required field"))
            continue
        if kind == "additionalProperties" and isinstance(error.instance, dict):
            known = set(error.schema.get("properties", {}))
            for name in error.instance:
                if name not in known:
                    problems.append(Problem(rel, _line_of(doc.node, [*path, name], key_only=True),
                                            _field_name([*path, name]), "unknown field"))
            continue
        if kind == "enum":
            message = f"{error.instance!r} is not one of {', '.join(map(str, error.validator_value))}"
        elif kind == "const":
            message = f"must be {error.validator_value!r}, not {error.instance!r}"
        else:
            message = error.message
        problems.append(Problem(rel, _line_of(doc.node, path), _field_name(path), message))
    return problems


def validate(root: Path | None = None, rules: Iterable[type] | None = None) -> list[Problem]:
    """Every problem in the catalog at ``root``, sorted by file and line.

    ``rules`` are the checker rule classes whose ``KNOWLEDGE`` ids must exist. By default they
    are kcheck's own rules when ``root`` is the catalog that ships with kcheck, and none for any
    other folder (the rules cite the shipped catalog, not a copy under test).
    """
    shipped = default_root().resolve()
    root = Path(root).resolve() if root else shipped
    if rules is None:
        rules = _registered_rules() if root == shipped else ()
    try:
        catalog, docs = _load(root)
    except CatalogError as exc:
        text = str(exc)
        match = re.match(r"^(.*?):(\d+): (.*)$", text)
        if match:
            return [Problem(_rel(Path(match[1]), root), int(match[2]), "", match[3])]
        return [Problem(_rel(root, root), 1, "", text)]
    problems: list[Problem] = []
    validators = {kind: _schema_validator(kind) for kind in SCHEMA_FILES}
    for path, doc in docs.items():
        kind = {INDEX_FILE: "index", SOURCES_FILE: "sources"}.get(path.name) if path.parent == root else "entry"
        problems += _schema_problems(validators[kind], doc, _rel(path, root))
        problems += _duplicate_keys(doc.node, _rel(path, root))
    problems += _integrity(catalog, docs, rules)
    return sorted(set(problems))


def _duplicate_keys(node: Any, rel: str, where: tuple = ()) -> list[Problem]:
    """YAML keeps the last of two equal keys silently; a catalog file must not repeat one."""
    import yaml

    problems = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if key_node.value in seen:
                problems.append(Problem(rel, key_node.start_mark.line + 1, _field_name([*where, key_node.value]),
                                        "duplicate key"))
            seen.add(key_node.value)
            problems += _duplicate_keys(value_node, rel, (*where, key_node.value))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            problems += _duplicate_keys(item, rel, (*where, i))
    return problems


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.parent).as_posix()
    except ValueError:
        return path.as_posix()


def _registered_rules() -> list[type]:
    from kcheck.registry import all_rules

    return list(all_rules())


def _integrity(catalog: Catalog, docs: dict[Path, _Document], rules: Iterable[type]) -> list[Problem]:
    root = catalog.root
    problems: list[Problem] = []

    def report(path: Path, where: list, message: str, key_only: bool = False) -> None:
        node = docs[path].node if path in docs else None
        problems.append(Problem(_rel(path, root), _line_of(node, where, key_only), _field_name(where), message))

    # Index: topic ids unique; each topic folder is listed.
    index_path = root / INDEX_FILE
    index_topics = (docs[index_path].data or {}).get("topics", []) if isinstance(docs[index_path].data, dict) else []
    seen_topics: set[str] = set()
    for i, topic in enumerate(index_topics if isinstance(index_topics, list) else []):
        if isinstance(topic, dict) and topic.get("id") in seen_topics:
            report(index_path, ["topics", i, "id"], f"duplicate topic {topic['id']!r}")
        elif isinstance(topic, dict):
            seen_topics.add(topic.get("id"))
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        if folder.name not in catalog.topics:
            report(index_path, ["topics"], f"topic folder {folder.name!r} has no entry here")
    for body in sorted(root.glob("*/*.md")):
        if not body.with_suffix(".yaml").is_file():
            problems.append(Problem(_rel(body, root), 1, "", f"Markdown body without an entry {body.stem}.yaml beside it"))

    # Sources: ids unique.
    sources_path = root / SOURCES_FILE
    source_list = (docs[sources_path].data or {}).get("sources", []) if isinstance(docs[sources_path].data, dict) else []
    seen_sources: set[str] = set()
    for i, source in enumerate(source_list if isinstance(source_list, list) else []):
        sid = source.get("id") if isinstance(source, dict) else None
        if sid in seen_sources:
            report(sources_path, ["sources", i, "id"], f"duplicate source id {sid!r}")
        seen_sources.add(sid)

    # Entries. Measured facts name their results file, registered as a `measurement` source.
    used_sources: set[str] = set()
    measurements = {s.get("path"): sid for sid, s in catalog.sources.items() if s.get("kind") == "measurement"}
    facts_by_key: dict[str, set[str]] = {
        eid: {f.get("key") for f in e.get("facts", []) if isinstance(f, dict) and f.get("key")}
        for eid, e in catalog.entries.items()
    }
    for entry_id, entry in sorted(catalog.entries.items()):
        path = catalog.files[entry_id]
        # Ids are unique because each must equal its file's <topic>/<slug>.
        if entry.get("id") != entry_id:
            report(path, ["id"], f"id {entry.get('id')!r} does not match its file; expected {entry_id!r}")
        topic = entry_id.split("/")[0]
        if entry.get("topic") in catalog.topics and entry.get("topic") != topic:
            report(path, ["topic"], f"topic {entry.get('topic')!r} does not match its folder {topic!r}")
        for i, other in enumerate(entry.get("related") or []):
            if other == entry_id:
                report(path, ["related", i], "an entry cannot be related to itself")
            elif other not in catalog.entries:
                report(path, ["related", i], f"unknown entry {other!r}")
        listed = [s for s in entry.get("sources") or [] if isinstance(s, str)]
        for i, sid in enumerate(listed):
            if sid not in catalog.sources:
                report(path, ["sources", i], f"unknown source {sid!r}")
            used_sources.add(sid)
        # Every number the summary claims is stated by one of the entry's facts, which carry evidence.
        stated: set[float] = set()
        for fact in entry.get("facts") or []:
            if isinstance(fact, dict):
                stated |= _numbers(str(fact.get("statement", "")))
                if isinstance(fact.get("value"), (int, float)) and not isinstance(fact.get("value"), bool):
                    stated.add(float(fact["value"]))
        for number in sorted(_numbers(str(entry.get("summary", ""))) - stated):
            report(path, ["summary"], f"the number {number:g} is not stated by any fact of this entry")
        _check_archs(entry, lambda where, message: report(path, where, message))
        cited: set[str] = set()
        cited_unlisted: set[str] = set()
        for i, fact in enumerate(entry.get("facts") or []):
            if not isinstance(fact, dict):
                continue
            sid = fact.get("source")
            if isinstance(sid, str):
                cited.add(sid)
                used_sources.add(sid)
                if sid not in catalog.sources:
                    report(path, ["facts", i, "source"], f"unknown source {sid!r}")
                elif sid not in listed and sid not in cited_unlisted:
                    cited_unlisted.add(sid)
                    report(path, ["facts", i, "source"], f"source {sid!r} is cited here but not listed in sources")
            for j, ref in enumerate(fact.get("inputs") or []):
                match = _FACT_REF.match(str(ref))
                if match and match["id"] not in catalog.entries:
                    report(path, ["facts", i, "inputs", j], f"unknown entry {match['id']!r}")
                elif match and match["key"] not in facts_by_key.get(match["id"], set()):
                    report(path, ["facts", i, "inputs", j], f"entry {match['id']!r} has no fact with key {match['key']!r}")
            if fact.get("evidence") == "measured" and fact.get("results"):
                sid = measurements.get(fact["results"])
                if sid is None:
                    report(path, ["facts", i, "results"],
                           f"results file {fact['results']!r} is not registered as a measurement source")
                used_sources.add(sid)
                problem = _check_measured(root, fact)
                if problem:
                    report(path, ["facts", i, problem[0]], problem[1])
        for i, sid in enumerate(listed):
            if sid in catalog.sources and sid not in cited:
                report(path, ["sources", i], f"source {sid!r} is listed but no fact cites it")
        keys = [f.get("key") for f in entry.get("facts") or [] if isinstance(f, dict) and f.get("key")]
        for key, count in Counter(keys).items():
            if count > 1:
                i = next(n for n, f in enumerate(entry["facts"]) if isinstance(f, dict) and f.get("key") == key)
                report(path, ["facts", i, "key"], f"fact key {key!r} is used {count} times in this entry")

    for i, source in enumerate(source_list if isinstance(source_list, list) else []):
        sid = source.get("id") if isinstance(source, dict) else None
        if sid and sid not in used_sources:
            report(sources_path, ["sources", i, "id"], f"source {sid!r} is not cited by any entry")

    for rule in rules:
        for kid in getattr(rule, "KNOWLEDGE", ()) or ():
            if kid not in catalog.entries:
                where = _rule_location(rule)
                problems.append(Problem(where[0], where[1], f"{getattr(rule, 'CODE', rule.__name__)}.KNOWLEDGE",
                                        f"unknown catalog entry {kid!r}"))
    return problems


def _check_archs(entry: dict, report) -> None:
    """A fact's ``archs`` are among the entry's (unless the entry applies to any architecture), and
    an entry that applies to an SM100 tag has at least one fact marked SM100-specific."""
    applies = entry.get("applies_to") if isinstance(entry.get("applies_to"), dict) else {}
    entry_archs = [a for a in applies.get("archs") or [] if isinstance(a, str)]
    marked: set[str] = set()
    for i, fact in enumerate(entry.get("facts") or []):
        if not isinstance(fact, dict):
            continue
        for j, arch in enumerate(fact.get("archs") or []):
            if not isinstance(arch, str):
                continue
            marked.add(arch)
            if entry_archs and "any" not in entry_archs and arch not in entry_archs:
                report(["facts", i, "archs", j], f"{arch!r} is not among the entry's applies_to.archs")
    if not any(_SM100_TAG.match(a) for a in marked):
        for i, arch in enumerate(entry_archs):
            if _SM100_TAG.match(arch):
                report(["applies_to", "archs", i],
                       f"the entry applies to {arch} but no fact is marked SM100-specific; mark one that states "
                       "something particular to SM100 with archs: [sm100], or drop the tag")
                break


def _rule_location(rule: type) -> tuple[str, int]:
    import inspect

    try:
        path = Path(inspect.getsourcefile(rule) or "")
        line = inspect.getsourcelines(rule)[1]
    except (OSError, TypeError):
        return (rule.__module__, 1)
    from kcheck.paths import PACKAGE_DIR

    try:
        return ("checker/" + path.resolve().relative_to(PACKAGE_DIR).as_posix(), line)
    except ValueError:
        return (path.as_posix(), line)


def _field_steps(field_path: str) -> list[str | dict[str, str]]:
    """``rows[op=rms_norm,tokens=1,impl=kcheck].median_us`` -> ``["rows", {...}, "median_us"]``.

    A bracket selects the one list item whose keys equal the given values (compared as text).
    """
    steps: list[str | dict[str, str]] = []
    for part in re.findall(r"[^.\[]+|\[[^\]]*\]", field_path):
        if part.startswith("["):
            pairs = [p.split("=", 1) for p in part[1:-1].split(",") if p.strip()]
            steps.append({k.strip(): v.strip() for k, v in (p if len(p) == 2 else (p[0], "") for p in pairs)})
        else:
            steps.append(part)
    return steps


def _check_measured(root: Path, fact: dict) -> tuple[str, str] | None:
    """A measured fact names a results file (``kernels/results/<name>.json``) and the ``field``
    inside it that holds its value (dotted keys, with ``[key=value,...]`` to pick one row of a
    list); the value must match what the file says within ``MEASURED_TOLERANCE``, the run-to-run
    spread of a median timing, so a re-run keeps the fact valid and a changed kernel does not.
    Returns (field, message)."""
    results = root.parent / fact["results"]
    if not results.is_file():
        return "results", f"results file {fact['results']!r} not found"
    try:
        data = json.loads(results.read_text(encoding="utf-8"))
    except ValueError as exc:
        return "results", f"results file {fact['results']!r} is not JSON: {exc}"
    value: Any = data
    for step in _field_steps(str(fact.get("field", ""))):
        if isinstance(step, dict) and isinstance(value, list):
            matches = [row for row in value if isinstance(row, dict)
                       and all(str(row.get(k)) == v for k, v in step.items())]
            if len(matches) != 1:
                return "field", f"selects {len(matches)} rows of {fact['results']!r}, not exactly one"
            value = matches[0]
        elif isinstance(step, str) and isinstance(value, dict) and step in value:
            value = value[step]
        else:
            return "field", f"no such field in {fact['results']!r}"
    stated = fact.get("value")
    if isinstance(stated, (int, float)) and isinstance(value, (int, float)):
        if abs(stated - value) > MEASURED_TOLERANCE * max(abs(value), 1e-12):
            return "value", f"{stated} does not match {value} in {fact['results']!r}"
    return None


# --------------------------------------------------------------------------- statistics


def stats(catalog: Catalog) -> dict:
    """Entries per topic, facts per evidence kind, sources per kind (and which are cited)."""
    topics = Counter(e.get("topic") for e in catalog.entries.values())
    evidence = Counter(
        f.get("evidence") for e in catalog.entries.values() for f in e.get("facts") or [] if isinstance(f, dict)
    )
    source_kinds = Counter(s.get("kind") for s in catalog.sources.values())
    kinds = Counter(e.get("kind") for e in catalog.entries.values())
    archs = Counter(
        arch for e in catalog.entries.values()
        for arch in ((e.get("applies_to") or {}).get("archs") or ["unrestricted"])
    )
    fact_archs = Counter(
        arch for e in catalog.entries.values() for f in e.get("facts") or [] if isinstance(f, dict)
        for arch in f.get("archs") or []
    )
    return {
        "entries": len(catalog.entries),
        "entries_per_topic": {t: topics.get(t, 0) for t in catalog.topics} | {
            t: n for t, n in sorted(topics.items()) if t not in catalog.topics
        },
        "entries_per_kind": dict(sorted(kinds.items())),
        "entries_per_arch": dict(sorted(archs.items(), key=_arch_order)),
        "facts": sum(evidence.values()),
        "facts_per_evidence": dict(sorted(evidence.items())),
        "arch_specific_facts": dict(sorted(fact_archs.items(), key=_arch_order)),
        "sources": len(catalog.sources),
        "sources_per_kind": dict(sorted(source_kinds.items())),
    }


def _arch_order(item: tuple[str, int]) -> tuple[int, str]:
    """sm80 < sm90 < sm100 < sm120 by number, then 'any' and 'unrestricted'."""
    match = re.match(r"^sm(\d+)", item[0])
    return (int(match[1]), item[0]) if match else (10**6, item[0])


# --------------------------------------------------------------------------- terminal output


def format_entry(catalog: Catalog, entry_id: str, base_url: str | None = None) -> str:
    """An entry as plain text for the terminal, with its sources resolved."""
    import textwrap

    entry = catalog.get(entry_id)
    def wrap(text: Any, indent: str = "  ", hang: str = "  ") -> str:
        return textwrap.fill(" ".join(str(text).split()), 96, initial_indent=indent,
                             subsequent_indent=indent + hang)

    out = [f"{entry['title']}", f"{entry_id}  ({entry.get('kind')}, topic {entry.get('topic')})", ""]
    out += [wrap(entry.get("summary", ""), "", ""), ""]
    if entry.get("facts"):
        out.append("Facts")
        for fact in entry["facts"]:
            value = f" [{fact['value']}{' ' + fact['unit'] if fact.get('unit') else ''}]" if "value" in fact else ""
            out.append(wrap(f"- {fact['statement']}{value}"))
            out.append(wrap(f"  evidence: {_evidence_text(catalog, fact)}", "    "))
        out.append("")
    for name, heading in (("guidance", "Guidance"), ("pitfalls", "Pitfalls"), ("signals", "Signals"),
                          ("verify", "Verify")):
        if entry.get(name):
            out.append(heading)
            out += [wrap(f"- {item}") for item in entry[name]]
            out.append("")
    if entry.get("related"):
        out.append("Related: " + ", ".join(entry["related"]))
    if base_url:
        out.append("Page: " + entry_url(entry_id, base_url))
    return "\n".join(out).rstrip() + "\n"


def _evidence_text(catalog: Catalog, fact: dict) -> str:
    kind = fact.get("evidence")
    if kind == "cited":
        source = catalog.sources.get(fact.get("source"), {})
        where = source.get("url") or f"{source.get('repo')}/{source.get('path')}@{str(source.get('commit', ''))[:12]}"
        return f"{source.get('title', fact.get('source'))}, {fact.get('locator')} <{where}>"
    if kind == "derived":
        return "derived from " + "; ".join(map(str, fact.get("inputs", [])))
    if kind == "measured":
        return f"measured, {fact.get('results')} ({fact.get('field')})"
    return str(kind)


# --------------------------------------------------------------------------- command line


@click.group("catalog")
def catalog() -> None:
    """Validate, show and search the knowledge catalog."""


@catalog.command("validate")
@click.argument("path", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path))
def validate_command(path: Path | None) -> None:
    """Check the catalog at PATH (default: the one kcheck ships) against the schemas and the
    integrity rules. Rule references are checked for the shipped catalog. Exits 2 on problems."""
    problems = validate(path)
    for problem in problems:
        click.echo(str(problem))
    if problems:
        click.echo(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in the catalog", err=True)
        raise SystemExit(2)
    data = stats(load_catalog(path))
    click.echo(f"OK: {data['entries']} entries in {len(data['entries_per_topic'])} topics, "
               f"{data['facts']} facts, {data['sources']} sources")


@catalog.command("show")
@click.argument("entry_id")
def show_command(entry_id: str) -> None:
    """Print the entry ENTRY_ID (``<topic>/<slug>``)."""
    cat = load_catalog()
    try:
        click.echo(format_entry(cat, entry_id, DEFAULT_DOCS_URL), nl=False)
    except KeyError as exc:
        raise click.ClickException(exc.args[0]) from None


@catalog.command("search")
@click.argument("words", nargs=-1, required=True)
@click.option("--limit", default=15, show_default=True, help="Print at most this many entries.")
def search_command(words: tuple[str, ...], limit: int) -> None:
    """List the entries that contain all WORDS, best match first."""
    found = load_catalog().search(words)
    if not found:
        click.echo(f"no entry contains all of: {' '.join(words)}", err=True)
        raise SystemExit(1)
    width = max(len(e["id"]) for e in found[:limit])
    for entry in found[:limit]:
        click.echo(f"{entry['id']:<{width}}  {entry['title']}")
    if len(found) > limit:
        click.echo(f"... and {len(found) - limit} more", err=True)


@catalog.command("stats")
@click.argument("path", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def stats_command(path: Path | None, fmt: str) -> None:
    """Count entries per topic, kind and architecture, facts per kind of evidence and per
    architecture they are marked specific to, and sources per kind."""
    data = stats(load_catalog(path))
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{data['entries']} entries, {data['facts']} facts, {data['sources']} sources")
    for title, key in (("Entries per topic", "entries_per_topic"), ("Entries per kind", "entries_per_kind"),
                       ("Entries per architecture", "entries_per_arch"),
                       ("Facts per evidence", "facts_per_evidence"),
                       ("Architecture-specific facts", "arch_specific_facts"), ("Sources per kind", "sources_per_kind")):
        click.echo(f"\n{title}")
        for name, count in data[key].items():
            click.echo(f"  {name:<16} {count:>4}")
