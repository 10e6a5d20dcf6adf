"""The scan: paths -> files -> prefilter -> ast gate -> one libcst parse -> model -> rules ->
suppressions -> findings.

Speed is designed in: a text prefilter and an ``ast`` summary decide which files need libcst at
all; libcst positions are computed only for files that report something; results are cached by
content hash in ``.kcheck_cache/``; files are spread over a process pool. ``shortcuts=False``
turns the prefilter, the gates and the cache off (the tests check the findings are the same).
"""

from __future__ import annotations

import ast
import errno
import gc
import hashlib
import json
import os
import pickle
import stat
import subprocess
import sys
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from kcheck import __version__, chunks
from kcheck.config import DEFAULT_MAX_FILE_SIZE, Config, config_for, project_root
from kcheck.finding import Finding, Related, rule_url

MAX_FILE_BYTES = DEFAULT_MAX_FILE_SIZE  # the default of ``max-file-size``
CACHE_DIR = ".kcheck_cache"


@dataclass
class FileResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # internal errors and notices, for stderr
    parsed: bool = False  # whether libcst parsed it
    cached: bool = False
    key: str = ""  # the content key its findings are cached under ("" when the cache is off)
    skipped: str = ""  # why the file was not checked at all ("" when it was)


@dataclass
class ScanResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    internal_error: bool = False
    files: int = 0
    parsed: int = 0
    cached: int = 0
    seconds: float = 0.0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why) of files not checked


@dataclass(frozen=True)
class Job:
    path: str  # as found
    rel: str  # relative to the project root: what reports show
    config: Config
    config_rel: str = ""  # relative to the configuration file's folder: what its patterns match
    root: str = ""  # the project root ``rel`` is relative to


# -- discovery ---------------------------------------------------------------------------------


def _git_files(folder: Path, include=None) -> list[Path] | None:
    """Python files under ``folder`` that git tracks or would track (ignored ones left out), and
    those ``include`` (:func:`_includer`) matches."""
    specs = ["*.py", "*.pyi", "*.ipynb"] if include is None else []  # with extra globs: every file, filtered here
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *specs],
            cwd=folder, capture_output=True, timeout=60, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
    if include is not None:
        names = [p for p in names if p.endswith(SOURCE_SUFFIXES) or include(p)]
    return [folder / p for p in names]


SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")  # notebooks are checked cell by cell (kcheck.notebook)


def _includer(patterns: tuple[str, ...]):
    """A test of a path (relative, with ``/``) against ``extend-include`` globs, gitignore-style;
    None when there are none."""
    if not patterns:
        return None
    import pathspec

    spec = pathspec.GitIgnoreSpec.from_lines(patterns)
    return lambda rel: spec.match_file(rel)


def _gitignore(folder: str):
    """The ``.gitignore`` of ``folder`` as a matcher, or None when it has none."""
    try:
        with open(os.path.join(folder, ".gitignore"), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(specs: list, path: str, is_dir: bool) -> bool:
    """Whether the ``.gitignore`` files in ``specs`` ((folder, matcher), outermost first) ignore
    ``path``; the deepest file with a matching pattern decides, as in git."""
    for base, spec in reversed(specs):
        rel = os.path.relpath(path, base).replace(os.sep, "/") + ("/" if is_dir else "")
        decided = spec.check_file(rel).include
        if decided is not None:
            return decided
    return False


def _walk(folder: Path, config: Config, root: Path, include=None) -> list[Path]:
    """Source files under ``folder`` outside git: exclude patterns and ``.gitignore`` files (those
    between the project root and ``folder`` too) are honoured, as ``git ls-files`` would."""
    found: list[Path] = []
    given = _rel(folder, root)
    # each folder's path relative to the root, from its parent's: os.walk never enters a symlinked
    # folder, so below ``folder`` no path needs resolving again
    rels = {str(folder): "" if given == "." else given}
    specs: dict[str, list] = {}
    outer: list = []
    absolute = folder.resolve()
    for parent in reversed(absolute.parents):  # the .gitignore files above ``folder``, up to the root
        if parent == root or root in parent.parents:
            spec = _gitignore(str(parent))
            if spec is not None:
                outer.append((str(parent), spec))
    for dirpath, dirnames, filenames in os.walk(folder):  # never follows symlinked folders: no loops
        here = Path(dirpath)
        prefix = rels.pop(dirpath)  # os.walk names a folder as os.path.join(parent, name), as recorded
        inherited = specs.pop(dirpath, outer)
        own = _gitignore(dirpath) if ".gitignore" in filenames else None
        active = [*inherited, (dirpath, own)] if own is not None else inherited
        kept = []
        for d in sorted(dirnames):
            rel = f"{prefix}/{d}" if prefix else d
            if not config.is_excluded(rel, given) and not (active and _ignored(active, os.path.join(dirpath, d), True)):
                kept.append(d)
                rels[os.path.join(dirpath, d)] = rel
                specs[os.path.join(dirpath, d)] = active
        dirnames[:] = kept
        found.extend(here / f for f in sorted(filenames) if (
            f.endswith(SOURCE_SUFFIXES) or include is not None and include(f"{prefix}/{f}" if prefix else f))
            and not (active and _ignored(active, os.path.join(dirpath, f), False)))
    return found


def _rel(path: Path, root: Path, resolved: bool = False) -> str:
    """``path`` relative to ``root``, forward slashes (``resolved``: ``path`` is resolved already)."""
    path = path if resolved else path.resolve()
    text, base = str(path), str(root)
    if text.startswith(base) and text[len(base):len(base) + 1] == os.sep:
        return Path(text[len(base) + 1:]).as_posix()
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return Path(os.path.relpath(path, root)).as_posix()


def _resolver():
    """``Path.resolve`` for many files, each folder resolved once: a file that is not a link
    resolves to its folder's resolved path plus its name."""
    folders: dict[str, str] = {}

    def resolve(path: Path) -> Path:
        if os.path.islink(path):
            return path.resolve()
        parent = os.path.dirname(os.path.abspath(path))
        real = folders.get(parent)
        if real is None:
            real = folders[parent] = str(Path(parent).resolve())
        return Path(real, path.name)

    return resolve


def _loops(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def discover(paths: list[str], explicit_config: Path | None = None, force_exclude: bool = False,
             extend_include: tuple[str, ...] = ()) -> tuple[list[Job], list[str]]:
    """The files to scan with their settings, and messages about paths that do not exist.
    ``extend_include`` (``--extend-include``) adds globs to the configuration's ``extend-include``."""
    jobs: list[Job] = []
    problems: list[str] = []
    seen: set[str] = set()
    report_root: Path | None = None  # one root for every reported path, so they all resolve against it
    resolve = _resolver()
    for raw in paths or ["."]:
        path = Path(raw)
        if not path.exists():
            problems.append(f"{raw}: no such file or folder")
            continue
        folder = path if path.is_dir() else path.parent
        root = project_root(folder.resolve())
        report_root = report_root or root
        given = _rel(path, root) if path.is_dir() else ""
        given_rel: dict[Path, str] = {}  # ``path`` relative to each configuration's folder
        if path.is_dir():
            in_git = (root / ".git").exists()
            here = config_for(folder.resolve(), explicit_config)
            include = _includer(tuple(here.extend_include) + tuple(extend_include))
            files = (_git_files(path, include) if in_git else None)
            if files is None:
                files = _walk(path, here, root, include)
            explicit = False
        else:
            files, explicit = [path], True
        for f in files:
            try:
                resolved = resolve(f)
            except (OSError, RuntimeError):  # a symlink loop
                problems.append(f"{f}: cannot resolve (symlink loop?)")
                continue
            if not resolved.exists():
                # Python 3.13's resolve() no longer raises on a loop; stat() still says ELOOP
                problems.append(f"{f}: cannot resolve (symlink loop?)" if _loops(f) else f"{f}: broken symlink, skipped")
                continue
            key = str(resolved)
            if key in seen:
                continue
            seen.add(key)
            config = config_for(resolved.parent, explicit_config)
            base = config.root if config.source else root
            config_rel = _rel(resolved, base, resolved=True)
            if given and base not in given_rel:
                given_rel[base] = _rel(path, base)
            if (not explicit or force_exclude) and config.is_excluded(config_rel, given_rel[base] if given else ""):
                continue
            jobs.append(Job(str(f), _rel(resolved, report_root, resolved=True), config, config_rel, str(report_root)))
    return jobs, problems


# -- one file ----------------------------------------------------------------------------------


def _meta_finding(code: str, message: str, rel: str, line: int, column: int, config: Config, source_line: str = "") -> Finding:
    from kcheck.registry import find_rule

    rule = find_rule(code)
    return Finding(
        code=code, name=rule.NAME, message=message, severity=config.severity_of(code, rule.NAME, rule.SEVERITY),
        path=rel, line=line, column=column, end_line=line, end_column=column + 1,
        knowledge=tuple(rule.KNOWLEDGE), url=rule_url(rule.NAME, config.docs_url), source_line=source_line.strip(),
    )


def check_source(source: str, rel: str, config: Config, shortcuts: bool = True, config_rel: str = "") -> FileResult:
    """Every finding in one file's text (never raises for bad input).

    ``rel`` is the path reports show; ``config_rel`` (default ``rel``) is the path the
    configuration's per-file patterns match.
    """
    from kcheck import suppress
    from kcheck.registry import all_rules

    result = FileResult()
    match = config_rel or rel
    rules = [r for r in all_rules() if r.family() != "meta" and config.is_enabled(r.CODE, r.NAME, match, r.PREVIEW)]
    meta_on = {r.CODE for r in all_rules() if r.family() == "meta" and config.is_enabled(r.CODE, r.NAME, match, r.PREVIEW)}
    if shortcuts:
        seen: dict[str, bool] = {}
        rules = [r for r in rules if r.prefilter(source, config, seen)]
    directives = suppress.parse_directives(source)
    if not rules and not directives and ("KC900" not in meta_on or (shortcuts and _compiles(source, rel))):
        return result  # nothing to check but the syntax, and the syntax is fine
    if shortcuts and rules and chunks.is_whole_too_large(source):
        done = _check_in_chunks(source, rel, config, rules, result)
        if done is not None:
            raw, spans = done
            _suppressed(result, raw, directives, spans)
            result.findings.extend(_meta_findings(directives, rel, config, meta_on, source.splitlines()))
            return result
    tree = None
    # a large file with suppression comments and no rule to run: no finding is matched against its
    # statements, so only whether it parses matters (KC900), which its chunks tell without a
    # whole-file tree; when they do not parse, the whole-file parse below reports why
    parses = shortcuts and not rules and chunks.is_large(source) and \
        chunks.trees(source, lambda _: None, lines=False) is not None
    try:
        if not parses:
            with warnings.catch_warnings():  # SyntaxWarnings about the scanned code are not kcheck's to print
                warnings.simplefilter("ignore")
                tree = ast.parse(source, filename=rel)
    except SyntaxError as exc:
        # Newer grammar than the running interpreter's (PEP 695 type parameters under 3.11, PEP 701
        # f-strings): libcst's parser knows it, and the rules need only libcst; the ast-based
        # shortcuts are skipped for this file.
        problem = "not tried" if _LIMITS in (exc.msg or "").lower() else _libcst_problem(source)
        if problem is not None:
            where = f"{exc.msg} (tried this interpreter's Python {sys.version_info.major}." \
                    f"{sys.version_info.minor} grammar, then libcst's grammar for newer Pythons: {problem})"
            result.findings.append(_meta_finding(
                "KC900", f"cannot parse: {where}", rel, exc.lineno or 1, exc.offset or 1, config, exc.text or ""))
            return result
    except (ValueError, RecursionError, MemoryError) as exc:
        if "KC900" in meta_on:
            result.findings.append(_meta_finding("KC900", f"cannot parse: {exc}", rel, 1, 1, config))
        return result
    if rules and tree is not None and not config.indexed and not config.demands and not config.once_after:
        from kcheck.project import file_answers

        config = replace(config, **file_answers(tree, rel))
    if shortcuts and rules and tree is not None:
        from kcheck.gate import summarize

        summary = summarize(tree)
        summary.path, summary.source = rel, source
        rules = [r for r in rules if r.gate(summary, config)]
        summary.memo.clear()  # the gates' shared facts point back at the summary: a cycle refcounting cannot free
    lines = source.splitlines()
    raw: list[Finding] = []
    if rules:
        raw, parse_problem = _run_rules(source, rel, config, rules, lines, result, tree)
        if parse_problem is not None and "KC900" in meta_on:
            result.findings.append(_meta_finding("KC900", parse_problem, rel, 1, 1, config))
            return result
    _suppressed(result, raw, directives, suppress.statement_spans(tree) if directives else [])
    result.findings.extend(_meta_findings(directives, rel, config, meta_on, lines))
    return result


def _suppressed(result: FileResult, raw: list[Finding], directives, spans) -> None:
    """The rules' findings into ``result``, each marked with the suppression comment that covers it."""
    from kcheck import suppress

    spans = suppress.SpanIndex(spans)
    suppress.attach(directives, spans)
    for finding in raw:
        directive = suppress.match(directives, spans, finding.code, finding.name, finding.line)
        if directive is None:
            result.findings.append(finding)
        else:
            result.findings.append(replace(finding, suppressed=directive.reason or "(no reason given)"))


def _check_in_chunks(source: str, rel: str, config: Config, rules, result: FileResult):
    """The rules over a file too large to parse whole (:func:`kcheck.chunks.is_whole_too_large`),
    one chunk of top-level statements at a time: each chunk is checked as a module made of the
    file's top-level imports and the chunk, so names resolve as in the file, and its findings are
    placed at their lines in the file. What spans chunks is not seen (a same-module helper or
    kernel defined in another chunk). Returns (findings, statement spans), or None when the text
    does not parse in chunks (the caller then reads it whole and reports why)."""
    from kcheck import suppress

    header = chunks.imports(source)
    if header is None:
        return None
    lines = source.splitlines()
    raw: list[Finding] = []
    spans: list[tuple[int, int]] = []

    def one(piece: str, first_line: int, is_first: bool) -> None:
        # the imports after the chunk's own lines: its lines keep their numbers, shifted by one amount
        own = piece if piece.endswith(("\n", "\r")) else piece + "\n"
        text = own + header
        shift = first_line - 1
        end = first_line + chunks.line_count(own)  # the header's first line, in the file's numbering
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text, filename=rel)
        spans.extend((a + shift, b + shift) for a, b in suppress.statement_spans(tree) if a + shift < end)
        from kcheck.gate import summarize

        summary = summarize(tree)
        summary.path, summary.source = rel, text
        wanted = [r for r in rules if r.gate(summary, config)]
        summary.memo.clear()
        if not wanted:
            return
        found, problem = _run_rules(text, rel, config, wanted, text.splitlines(), result, tree)
        if problem is not None:
            raise SyntaxError(problem)  # libcst refuses the chunk: read the file whole
        for f in found:
            line, end_line = f.line + shift, f.end_line + shift
            if first_line <= line < end:  # not the header's lines
                raw.append(replace(f, line=line, end_line=end_line,
                                   source_line=lines[line - 1].strip() if line <= len(lines) else "",
                                   related=tuple(replace(r, line=r.line + shift, end_line=r.end_line + shift)
                                                 for r in f.related)))

    if chunks.each(source, one, chunks.RULE_CHUNK_BYTES) is None:
        return None
    return raw, spans


# CPython's own limits, not grammar: code past them does not run on any CPython, so it is reported
# even though libcst could parse it.
_LIMITS = "too many"  # "too many nested parentheses", "too many statically nested blocks"


def _libcst_problem(source: str) -> str | None:
    """None when libcst parses ``source``, else the first line of its error."""
    import libcst as cst

    try:
        parse_cst(source)
    except (cst.ParserSyntaxError, RecursionError, MemoryError, ValueError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def _compiles(source: str, rel: str) -> bool:
    """Whether the text compiles: a syntax check several times cheaper than ``ast.parse``, which
    builds a Python object per node. When it fails (or compile rejects what ``ast.parse`` accepts,
    such as ``return`` outside a function), the caller parses with ``ast`` and reports from that.

    A large file is compiled a chunk of top-level statements at a time (:mod:`kcheck.chunks`); when
    a chunk fails, the whole text is compiled, so the answer is the same either way."""
    if chunks.is_large(source) and chunks.compiles(source, rel):
        return True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, rel, "exec", dont_inherit=True)
    except Exception:  # noqa: BLE001 - any failure sends the file down the ast path, which reports it
        return False
    return True


def _run_rules(source, rel, config, rules, lines, result, tree) -> tuple[list[Finding], str | None]:
    import libcst as cst

    from kcheck.model import release

    try:
        module = parse_cst(source)
    except (cst.ParserSyntaxError, RecursionError) as exc:
        module = None
        tail = source.rstrip()
        if tail.endswith("\\"):
            # CPython accepts a line continuation into the end of the file (a last ``\`` followed by
            # CRLF), libcst does not: the continuation joins nothing, so a space in its place is the
            # same program, at the same positions
            try:
                module = parse_cst(tail[:-1] + " " + source[len(tail):])
            except (cst.ParserSyntaxError, RecursionError):
                pass
        if module is None:
            return [], f"libcst cannot parse this file: {str(exc).splitlines()[0]}"
    result.parsed = True
    try:
        return _check_module(source, rel, config, rules, lines, result, tree, module)
    finally:
        release()  # the node index holds the whole libcst tree


def _check_module(source, rel, config, rules, lines, result, tree, module) -> tuple[list[Finding], str | None]:
    """Build the model of a parsed module, run the rules over it, and place what they report."""
    from kcheck import positions
    from kcheck.model import build_model
    from kcheck.rule import FileContext

    model = build_model(module, config, rel)
    context = FileContext(rel, source, module, model, config)
    visitors = []
    for rule in rules:
        try:
            visitors.append(rule(context))
        except Exception:  # noqa: BLE001 - a rule's bug is reported, the scan goes on
            result.errors.append(f"internal error: {rule.CODE} failed to start on {rel}:\n{traceback.format_exc()}")
    try:
        _dispatch(visitors, module, model)
    except Exception:  # noqa: BLE001
        result.errors.append(f"internal error while checking {rel}:\n{traceback.format_exc()}")
        return [], None
    reports = [r for v in visitors for r in v.reports]
    if not reports:
        return [], None
    nodes = [r.node for r in reports] + [node for r in reports for node, _ in r.related]
    spans = (positions.resolve(module, tree, source, nodes) if tree is not None else None) or \
        positions.resolve_with_libcst(module, nodes)
    out: list[Finding] = []
    seen: set[tuple] = set()
    for rep in reports:
        pos = spans.get(id(rep.node))
        if pos is None:
            continue
        if rep.line is not None and 1 <= rep.line <= len(lines):  # a line inside a string the node enters
            text = lines[rep.line - 1]
            indent = len(text) - len(text.lstrip())
            rep = replace(rep, message=f"{rep.message} (entered at line {pos.line})")
            pos = replace(pos, line=rep.line, column=indent, end_line=rep.line, end_column=len(text.rstrip()))
        key = (rep.rule.CODE, pos.line, pos.column, rep.message)
        if key in seen:
            continue
        seen.add(key)
        rule = rep.rule
        related = tuple(Related(p.line, p.column + 1, p.end_line, p.end_column + 1, note)
                        for node, note in rep.related if (p := spans.get(id(node))) is not None)
        out.append(Finding(
            code=rule.CODE, name=rule.NAME, message=rep.message,
            severity=config.severity_of(rule.CODE, rule.NAME, rule.SEVERITY), path=rel,
            line=pos.line, column=pos.column + 1, end_line=pos.end_line, end_column=pos.end_column + 1,
            knowledge=tuple(rule.KNOWLEDGE), url=rule_url(rule.NAME, config.docs_url), context=rep.context,
            source_line=lines[pos.line - 1].strip() if pos.line <= len(lines) else "", related=related,
        ))
    return out, None


def parse_cst(source: str):
    """``libcst.parse_module`` without validating every node again as it is built.

    Each libcst node checks its own fields in ``CSTNode.__post_init__``; for a tree the native
    parser just built from valid text that check cannot fail, and it costs about a third of the
    parse. The hook is switched off for this one call and restored before returning, so nothing
    else that uses libcst in the process sees a difference.
    """
    import libcst as cst
    from libcst._nodes.base import CSTNode

    validate = CSTNode.__post_init__
    CSTNode.__post_init__ = _no_validation
    try:
        return cst.parse_module(source)
    finally:
        CSTNode.__post_init__ = validate


def _no_validation(self) -> None:
    return None


_METHODS: dict[type, tuple[str, ...]] = {}


def _visitor_methods(cls: type) -> tuple[str, ...]:
    """The ``visit_*``/``leave_*`` methods a rule class defines (cached; libcst's lookup is slow)."""
    if cls not in _METHODS:
        from kcheck.rule import Rule

        base = set(dir(Rule))
        _METHODS[cls] = tuple(n for n in dir(cls) if n.startswith(("visit_", "leave_")) and (
            n not in base or getattr(cls, n) is not getattr(Rule, n)))
    return _METHODS[cls]


def _dispatch(visitors, module, model) -> None:
    """Run every rule's ``visit_<Node>``/``leave_<Node>`` methods in one walk of the tree.

    libcst's own ``visit_batched`` rebuilds each node as it goes; the rules only read the tree,
    so a run over the model's pre-order ``NodeIndex`` does the same job at a fraction of the cost.
    """
    enter: dict[str, list] = {}
    leave: dict[str, list] = {}
    for v in visitors:
        for name in _visitor_methods(type(v)):
            fn = getattr(v, name)
            kind, _, node_type = name.partition("_")
            if "_" in node_type:
                raise TypeError(f"{type(v).__name__}.{name}: attribute visitors are not supported")
            (enter if kind == "visit" else leave).setdefault(node_type, []).append(fn)
    if set(enter) | set(leave) <= {"Module"}:
        for fn in enter.get("Module", []):
            fn(module)
        for fn in leave.get("Module", []):
            fn(module)
        return
    order, end = model.index.order, model.index.end
    pending: list[tuple[int, object]] = []  # (index past the node's subtree, node) awaiting leave_*
    for i in range(len(order) + 1):  # one step past the last node, to leave what is still open
        while pending and pending[-1][0] <= i:
            done = pending.pop()[1]
            for fn in leave.get(type(done).__name__, ()):
                fn(done)
        if i < len(order):
            node = order[i]
            for fn in enter.get(type(node).__name__, ()):
                fn(node)
            pending.append((end[i], node))


def _meta_findings(directives, rel, config, meta_on, lines) -> list[Finding]:
    from kcheck.registry import all_rules, find_rule

    out = []
    known = {r.CODE for r in all_rules()}
    for d in directives:
        text = lines[d.line - 1] if d.line <= len(lines) else ""
        if not d.selectors and "KC903" in meta_on:
            out.append(_meta_finding("KC903", "blanket suppression: name the rules it hides, e.g. "
                                     "`# kcheck: ignore[KC201] reason`", rel, d.line, d.column, config, text))
        if not d.reason and config.require_suppression_reason and "KC902" in meta_on:
            out.append(_meta_finding("KC902", f"suppression of {d.text or 'every rule'} gives no reason", rel,
                                     d.line, d.column, config, text))
        if "KC901" in meta_on and d.selectors:
            for sel in d.selectors:
                rule = find_rule(sel)
                is_prefix = sel.startswith("KC") and any(c.startswith(sel) for c in known)
                if rule is None and not is_prefix:
                    out.append(_meta_finding("KC901", f"suppression names unknown rule {sel!r}", rel, d.line,
                                             d.column, config, text))
                    continue
                if rule is not None and (rule.family() == "meta" or not config.is_enabled(rule.CODE, rule.NAME, None, rule.PREVIEW)):
                    continue
                if not any(code == sel or code.startswith(sel) or (rule and code == rule.CODE) for code in d.used):
                    out.append(_meta_finding("KC901", f"unused suppression of {sel}: nothing here is reported",
                                             rel, d.line, d.column, config, text))
    return out


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB" if n >= 1024 * 1024 else f"{n} bytes"


def _read(job: Job) -> tuple[str | None, bytes | str, Finding | None]:
    """(text, bytes, problem); for a file over the size limit (None, why it is skipped, None)."""
    try:
        info = os.stat(job.path)
        if not stat.S_ISREG(info.st_mode):  # a FIFO or device named *.py: reading it could block forever
            return None, b"", _meta_finding("KC900", "cannot read file: not a regular file", job.rel, 1, 1, job.config)
        if info.st_size > job.config.max_file_size:
            return None, f"larger than max-file-size: {_mib(info.st_size)} is more than {_mib(job.config.max_file_size)}; " \
                         "raise it with --max-file-size or max-file-size in [tool.kcheck]", None
        with open(job.path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        return None, b"", _meta_finding("KC900", f"cannot read file: {exc.strerror or exc}", job.rel, 1, 1, job.config)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return None, data, _meta_finding("KC900", f"not UTF-8 (byte {exc.start}: {exc.reason})", job.rel, line, 1, job.config)
    return text, data, None


def check_job(job: Job, shortcuts: bool, cache: dict[str, list] | None = None) -> FileResult:
    """One file's findings; ``cache`` (content key -> findings, see :class:`_ContentCache`) answers
    for a text checked before with the same kcheck code, configuration and path."""
    text, data, problem = _read(job)
    if problem is not None:
        return FileResult(findings=[problem])
    if text is None:  # ``data`` says why
        return FileResult(skipped=data)
    key = ""
    if cache is not None and shortcuts:
        key = hashlib.sha256(b"\0".join([code_fingerprint().encode(), job.config.fingerprint().encode(),
                                          job.rel.encode(), data])).hexdigest()
        findings = _decoded(cache.get(key))
        if findings is not None:
            return FileResult(findings=findings, cached=True, key=key)
    try:
        with collector_paused():
            result = _check_text(text, job.rel, job.config, shortcuts, job.config_rel)
    except Exception:  # noqa: BLE001 - never let one file stop the scan
        return FileResult(errors=[f"internal error while checking {job.rel}:\n{traceback.format_exc()}"])
    if not result.errors:
        result.key = key
    return result


def _check_text(text: str, rel: str, config: Config, shortcuts: bool = True, config_rel: str = "") -> FileResult:
    """``check_source``, or for a Jupyter notebook its code cells, findings placed in their cells."""
    if rel.endswith(".ipynb"):
        from kcheck import notebook

        return notebook.check(text, rel, config, shortcuts, config_rel)
    return check_source(text, rel, config, shortcuts, config_rel)


@contextmanager
def collector_paused():
    """Python's cycle collector off while one file is checked, and one young-generation pass after.

    Parsing a file allocates hundreds of thousands of nodes that all stay alive until the file is
    done; with the collector on, its automatic passes walk those live trees again and again (a
    fifth to a third of a cold scan's CPU time, measured in ``benchmarks/scan_phases.py``).
    Refcounting frees each file's objects when it is done; the one pass after the file frees what
    a reference cycle kept, so memory stays bounded by the largest file.
    """
    if not gc.isenabled():  # the caller manages the collector: leave it alone
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


_worker_cache: dict[str, list] | None = None  # a worker process's copy of the content cache


def _compact(jobs: list[Job]) -> list[Job]:
    """The annotated jobs again, rebuilt once the project index is freed. The index's objects and the
    jobs' answers share the allocator's arenas, and an arena goes back to the system only when all of
    it is free: the answers alone (1.5 MiB pickled on vLLM) kept 80 MiB of arenas for the rest of the
    scan, in this process and again in every worker forked from it (vLLM cold scan, -j 2: 476 MiB
    at most over all processes, 314 MiB with the jobs rebuilt: benchmarks/process_memory.py)."""
    data = pickle.dumps(jobs, protocol=pickle.HIGHEST_PROTOCOL)
    del jobs
    gc.collect()
    return pickle.loads(data)


def _start_worker(cache: dict[str, list] | None) -> None:
    global _worker_cache
    _worker_cache = cache


def _check_chunk(chunk: list[Job], shortcuts: bool) -> list[FileResult]:
    return [check_job(job, shortcuts, _worker_cache) for job in chunk]


# -- cache -------------------------------------------------------------------------------------


_CODE_FINGERPRINT: list[str] = []


def code_fingerprint() -> str:
    """kcheck's version plus the size and modification time of every module of the package, so a
    changed rule (an upgrade, or an edit in a checkout) never reads results cached by the old one."""
    if not _CODE_FINGERPRINT:
        from kcheck.paths import PACKAGE_DIR

        digest = hashlib.sha256(__version__.encode())
        for path in sorted(PACKAGE_DIR.rglob("*.py")):
            st = path.stat()
            digest.update(f"{path.relative_to(PACKAGE_DIR)}:{st.st_size}:{st.st_mtime_ns}".encode())
        _CODE_FINGERPRINT.append(digest.hexdigest()[:16])
    return _CODE_FINGERPRINT[0]


def cache_dir_for(root: Path, cache_dir: str | os.PathLike | None = None) -> str:
    """The result cache's folder: ``cache_dir`` (``--cache-dir``), else ``$KCHECK_CACHE_DIR``, else
    ``.kcheck_cache`` in the project root; a version subfolder in each."""
    chosen = cache_dir or os.environ.get("KCHECK_CACHE_DIR")
    base = Path(chosen).expanduser() if chosen else root / CACHE_DIR
    if not base.is_absolute():
        base = Path.cwd() / base
    folder = base / __version__
    if not base.exists():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (base / ".gitignore").write_text("# created by kcheck\n*\n")
        except OSError:
            pass
    return str(folder)


# -- the scan ----------------------------------------------------------------------------------


def scan(jobs: list[Job], jobs_n: int | None = None, shortcuts: bool = True, cache: bool = True,
         progress=None, cache_dir: str | os.PathLike | None = None) -> ScanResult:
    """Check every job, in parallel when it pays, and collect sorted findings.

    With the cache on, files whose size and modification time match the cache's index are not
    even read (a warm scan is one ``stat`` per file); the others go through the content-hash cache.
    """
    start = time.perf_counter()
    result = ScanResult(files=len(jobs))
    cache_root = None
    if cache and shortcuts and jobs:
        first = jobs[0]  # the configuration's folder, else the root discovery reported paths against
        cache_root = cache_dir_for(first.config.root if first.config.source else Path(first.root) if first.root
                                   else project_root(Path(first.path).resolve().parent), cache_dir)
    # the project index: each file learns which of its functions run every serving step (kcheck.project)
    from kcheck.project import annotate

    jobs = _compact(annotate(jobs, cache_root, code_fingerprint(), jobs_n or os.cpu_count() or 1))
    index = _StatIndex(cache_root) if cache_root else None
    contents = _ContentCache(cache_root) if cache_root else None
    known: dict[int, FileResult] = {}
    if index is not None:
        for i, job in enumerate(jobs):
            hit = index.get(job)
            if hit is not None:
                known[i] = hit
        if progress and known:
            progress(len(known))
    todo = [job for i, job in enumerate(jobs) if i not in known]
    cache_map = contents.load() if contents is not None and todo else None
    n = jobs_n or os.cpu_count() or 1
    fresh: list[FileResult] = []
    if n > 1 and len(todo) >= 32:
        # largest files first, in small chunks: the big files (most likely to need libcst) start
        # early and the small ones even out the end, so no worker is left with a long tail
        order = sorted(range(len(todo)), key=lambda i: -_size(todo[i].path))
        size = max(2, min(16, len(todo) // (n * 32) or 1))
        chunks = [order[i:i + size] for i in range(0, len(order), size)]
        slots: list[FileResult | None] = [None] * len(todo)
        with ProcessPoolExecutor(max_workers=n, initializer=_start_worker, initargs=(cache_map,)) as pool:
            for chunk, chunk_result in zip(chunks, pool.map(
                    _check_chunk, [[todo[i] for i in c] for c in chunks], [shortcuts] * len(chunks))):
                for i, fr in zip(chunk, chunk_result):
                    slots[i] = fr
                if progress:
                    progress(len(chunk_result))
        fresh = [fr for fr in slots if fr is not None]
    else:
        for job in todo:
            fresh.append(check_job(job, shortcuts, cache_map))
            if progress:
                progress(1)
    if index is not None:
        for job, fr in zip(todo, fresh):
            index.put(job, fr)
        index.save()
    if contents is not None and cache_map is not None:
        contents.save(fresh)
    fr_paths = {id(fr): job.rel for job, fr in zip(todo, fresh)}
    for fr in [*known.values(), *fresh]:
        result.findings.extend(fr.findings)
        result.errors.extend(fr.errors)
        if fr.skipped:
            result.skipped.append((fr_paths[id(fr)], fr.skipped))
        result.internal_error |= any(e.startswith("internal error") for e in fr.errors)
        result.parsed += fr.parsed
        result.cached += fr.cached
    result.findings.sort(key=lambda f: f.sort_key)
    result.seconds = time.perf_counter() - start
    return result


class _StatIndex:
    """Findings per file keyed on (size, mtime, configuration), in one file per kcheck code version.

    Like git's index, a file modified within the last two seconds before the index is written is
    left out of it: its time stamp cannot tell a second edit in the same tick from the first."""

    def __init__(self, cache_root: str) -> None:
        self.path = os.path.join(cache_root, f"index-{code_fingerprint()}.json")
        self.entries: dict[str, list] = _read_json(self.path)
        self.changed = False

    @staticmethod
    def _stamp(job: Job) -> list | None:
        try:
            st = os.stat(job.path)
        except OSError:
            return None
        return [st.st_size, st.st_mtime_ns, job.config.fingerprint(), job.rel]

    def get(self, job: Job) -> FileResult | None:
        entry = self.entries.get(os.path.abspath(job.path))
        if type(entry) is not list or len(entry) != 5 or entry[:4] != self._stamp(job):
            return None
        findings = _decoded(entry[4])
        return None if findings is None else FileResult(findings=findings, cached=True)

    def put(self, job: Job, fr: FileResult) -> None:
        stamp = self._stamp(job)
        key = os.path.abspath(job.path)
        if fr.errors or fr.skipped or stamp is None or stamp[1] > time.time_ns() - 2_000_000_000:
            self.entries.pop(key, None)
            return
        self.entries[key] = [*stamp, [f.to_dict() for f in fr.findings]]
        self.changed = True

    def save(self) -> None:
        if self.changed:
            _write_json(self.path, self.entries)


class _ContentCache:
    """Findings by content key (kcheck code, configuration, path and the file's bytes), in one file
    per kcheck code version: what answers for a file whose time stamp changed but whose text is one
    checked before (a branch switched and switched back, a fresh checkout). Read once per scan and
    written once, by the main process; the most recently used ``LIMIT`` keys are kept."""

    LIMIT = 100_000

    def __init__(self, cache_root: str) -> None:
        self.path = os.path.join(cache_root, f"content-{code_fingerprint()}.json")
        self.entries: dict[str, list] = {}

    def load(self) -> dict[str, list]:
        self.entries = _read_json(self.path)
        return self.entries

    def save(self, results: list[FileResult]) -> None:
        entries = self.entries
        for fr in results:
            if fr.key:  # moved to the end: the most recently used are kept
                entries.pop(fr.key, None)
                entries[fr.key] = [f.to_dict() for f in fr.findings]
        if len(entries) > self.LIMIT:
            entries = dict(list(entries.items())[-self.LIMIT:])
        _write_json(self.path, entries)


def _decoded(stored) -> list[Finding] | None:
    """The findings a cache entry holds, or None when it is not one (a damaged cache is a miss)."""
    if type(stored) is not list:
        return None
    try:
        return [Finding.from_dict(d) for d in stored]
    except (TypeError, ValueError, KeyError):
        return None


def _read_json(path: str) -> dict:
    """The table a cache file holds; empty when it is missing or damaged (the scan starts again)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if type(data) is dict else {}


def _write_json(path: str, data: dict) -> None:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file) and remove the files
    of the same kind written by other kcheck code, which are never read again."""
    tmp = f"{path}.{os.getpid()}"
    folder, own = os.path.split(path)
    kind = own.split("-")[0] + "-"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
        for name in os.listdir(folder):
            if name.startswith(kind) and name.endswith(".json") and name != own:
                os.unlink(os.path.join(folder, name))
    except OSError:
        pass


def stdin_job(filename: str, explicit_config: Path | None = None) -> Job:
    """The job for source read from stdin and reported as ``filename``."""
    folder = Path(filename).resolve().parent
    config = config_for(folder if folder.exists() else Path.cwd(), explicit_config)
    root = project_root(Path.cwd())
    base = config.root if config.source else root
    return Job(filename, _rel(Path(filename), root), config, _rel(Path(filename), base), str(root))


def scan_stdin(text: str, job: Job) -> ScanResult:
    if len(text.encode("utf-8", "surrogatepass")) > job.config.max_file_size:
        return ScanResult(files=1, skipped=[(job.rel, f"larger than max-file-size ({_mib(job.config.max_file_size)})")])
    fr = _check_text(text, job.rel, job.config, config_rel=job.config_rel)
    return ScanResult(findings=sorted(fr.findings, key=lambda f: f.sort_key), errors=fr.errors,
                      internal_error=any(e.startswith("internal error") for e in fr.errors), files=1,
                      parsed=int(fr.parsed), skipped=[(job.rel, fr.skipped)] if fr.skipped else [])


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use the kcheck command")
