"""The ``kcheck`` command. Thin: parses options, calls the engine and the reporters.

Exit codes follow ruff: 0 clean, 1 findings at or above the fail level, 2 usage, configuration
or internal error.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import click

from kcheck import __version__
from kcheck.reporters import FORMATS, ReportContext, parse_spec, write_all

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _fail(message: str) -> None:
    click.echo(f"kcheck: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


class _Progress:
    """A one-line progress counter on stderr, only on a terminal and only when a scan takes a moment."""

    def __init__(self, total: int, quiet: bool = False) -> None:
        import time

        self.total, self.done, self.start, self.time = total, 0, time.monotonic(), time.monotonic
        self.enabled = not quiet and sys.stderr.isatty() and not os.environ.get("CI") and total > 50
        self.shown = False

    def __call__(self, n: int) -> None:
        self.done += n
        if self.enabled and self.time() - self.start > 0.5:
            self.shown = True
            width = 30
            filled = int(width * self.done / max(1, self.total))
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} files")
            sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r" + " " * 60 + "\r")


class _LazyGroup(click.Group):
    """A group whose heavier subcommand groups are imported only when used (fast start-up)."""

    lazy = {"catalog": ("kcheck.catalog", "catalog")}

    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx, name):
        if name in self.lazy:
            import importlib

            module, attr = self.lazy[name]
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kcheck")
def main() -> None:
    """kcheck: find the mistakes that make a GPU kernel change look good while it is wrong or useless."""


def _split(values: tuple[str, ...]) -> tuple[str, ...] | None:
    if not values:
        return None
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


@main.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("-o", "--output-format", "formats", multiple=True, metavar="FORMAT[:FILE]",
              help=f"Output format, optionally written to FILE ('-': stdout); repeatable. One of: {', '.join(FORMATS)}.")
@click.option("--select", multiple=True, help="Rules to enable (codes, prefixes, names, ALL); replaces the config's.")
@click.option("--extend-select", multiple=True, help="Rules to enable on top of the selection.")
@click.option("--ignore", multiple=True, help="Rules to disable.")
@click.option("--preview/--no-preview", default=None,
              help="Also run the preview rules (`kcheck rules` marks them); --no-preview overrides the config.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Use this configuration file instead of the nearest one.")
@click.option("--fail-level", type=click.Choice(["info", "warning", "error"]),
              help="Lowest severity that makes kcheck exit 1 (default: info, any finding).")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: all cores).")
@click.option("--no-cache", is_flag=True,
              help="Neither read nor write any cache (the result cache, the user cache folder).")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), envvar="KCHECK_CACHE_DIR",
              help="The result cache's folder (default: .kcheck_cache in the project root; env KCHECK_CACHE_DIR).")
@click.option("--no-shortcuts", is_flag=True,
              help="Run every rule on every file: no prefilter, no gate, no cache (slow; for checking kcheck).")
@click.option("--max-file-size", type=click.IntRange(min=1), metavar="BYTES",
              help="Largest file checked (default 4 MiB); larger files are reported as not checked.")
@click.option("--stdin-filename", help="Read the source from stdin and report it under this file name.")
@click.option("--extend-include", multiple=True, metavar="GLOB",
              help="Also read files matching GLOB as Python (e.g. '*.py.txt'); repeatable, on top of the config's.")
@click.option("--force-exclude", is_flag=True,
              help="Apply exclude patterns to files named on the command line (and --stdin-filename) too.")
@click.option("--statistics", is_flag=True,
              help="Print the number of findings per rule instead of the findings (as JSON with -o json); "
                   "outputs written to files are written as usual.")
@click.option("--diff-base", metavar="REF",
              help="Report only what the change since the merge base of REF and HEAD is responsible for.")
@click.option("--filter-mode", type=click.Choice(["new", "added", "diff_context", "file", "nofilter"]),
              help="With --diff-base: findings the merge base did not have, wherever they are (new, the "
                   "default); or findings on added lines, in diff hunks, in changed files, or all.")
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Hide the findings recorded in this baseline file (written by `kcheck baseline`).")
@click.option("--sarif-rules", type=click.Choice(["all", "fired"]), default="all", show_default=True,
              help="Which rules the SARIF output describes: every rule, or only those with findings.")
@click.option("--group/--no-group", default=True, show_default=True,
              help="One finding per rule and function, listing the function's other places as related "
                   "locations; --no-group reports every place on its own.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on stderr but errors, and no summary line.")
def check(paths, formats, select, extend_select, ignore, preview, config_file, fail_level, exit_zero, jobs, no_cache,
          cache_dir, no_shortcuts, max_file_size, stdin_filename, extend_include, force_exclude, statistics, diff_base,
          filter_mode, baseline_file, sarif_rules, group, quiet) -> None:
    """Check PATHS (files or folders; '-' reads stdin) for serving-kernel mistakes."""
    from kcheck import config as config_module
    from kcheck.config import ConfigError, unknown_selector_errors
    from kcheck.engine import discover, scan, scan_stdin, stdin_job
    from kcheck.reporters import NOT_CHECKED, OutputError, not_checked

    specs = [parse_spec(s) for s in formats] or [("concise", None)]
    for name, _ in specs:
        if name not in FORMATS:
            _fail(f"unknown output format {name!r}; choose from: {', '.join(FORMATS)}")
    if filter_mode and not diff_base:
        _fail("--filter-mode needs --diff-base REF")
    filter_mode = filter_mode or "new"
    if no_cache:
        config_module.USE_USER_CACHE = False
    from_stdin = paths == ("-",) or (not paths and stdin_filename is not None)
    if from_stdin and diff_base:
        _fail("--diff-base cannot be used with source read from stdin")
    diff = None
    overrides = {"select": _split(select), "extend_select": _split(extend_select), "ignore": _split(ignore),
                 "fail_level": fail_level, "preview": preview, "max_file_size": max_file_size}
    problems = []
    for option, values in (("--select", overrides["select"]), ("--extend-select", overrides["extend_select"]),
                           ("--ignore", overrides["ignore"])):
        problems += unknown_selector_errors(values or (), option)
    if problems:
        _fail("\n".join(problems))
    before: list = []
    try:
        if from_stdin:
            job = stdin_job(stdin_filename or "stdin.py", config_file)
            if force_exclude and stdin_filename and job.config.is_excluded(job.config_rel):
                sys.stdin.read()
                sys.exit(EXIT_CLEAN)  # excluded: nothing to check, as ruff does
            jobs_list = [job]
        else:
            jobs_list, problems = discover(list(paths), config_file, force_exclude, tuple(extend_include))
            for p in problems:
                click.echo(f"kcheck: {p}", err=True)
            if problems and not jobs_list:
                sys.exit(EXIT_ERROR)
        jobs_list = [replace(j, config=j.config.with_overrides(**overrides)) for j in jobs_list]
        if from_stdin:
            result = scan_stdin(sys.stdin.read(), jobs_list[0])
        else:
            if diff_base:
                diff = _load_diff(diff_base, Path(jobs_list[0].root) if jobs_list else Path.cwd())
                if filter_mode != "nofilter":  # only files the change touches can have findings to show
                    jobs_list = [j for j in jobs_list if diff.change_of(Path(j.path)) is not None]
            progress = _Progress(len(jobs_list), quiet)
            result = scan(jobs_list, jobs, shortcuts=not no_shortcuts, cache=not no_cache, progress=progress,
                          cache_dir=cache_dir)
            progress.close()
            if diff is not None and filter_mode == "new":
                before = _base_findings(diff, jobs_list, not no_shortcuts)
        if jobs_list:
            config, root = jobs_list[0].config, Path(jobs_list[0].root)
        else:
            from kcheck.config import config_for

            config, root = config_for(Path.cwd(), config_file).with_overrides(**overrides), Path.cwd()
    except ConfigError as exc:
        _fail(str(exc))
    for err in result.errors:
        if not quiet or err.startswith("internal error"):
            click.echo(f"kcheck: {err}", err=True)
    findings, hidden = _hide(result.findings, root, diff_base, diff, filter_mode, baseline_file,
                             None if from_stdin else {j.rel for j in jobs_list}, quiet, before)
    hidden += [(not_checked(path, why, config.docs_url), NOT_CHECKED) for path, why in result.skipped]
    if not quiet:
        for path, why in result.skipped:
            click.echo(f"kcheck: {path}: skipped: {why}", err=True)
    active = [f for f in findings if f.suppressed is None]  # every place: what --statistics counts
    if group:
        from kcheck.finding import group_by_context

        findings = group_by_context(findings)
    from kcheck.registry import all_rules

    ctx = ReportContext(root=root, docs_url=config.docs_url, files=result.files, hidden=hidden, quiet=quiet,
                        color=_use_color(), sarif_rules=sarif_rules,
                        preview_off=sum(1 for r in all_rules() if r.PREVIEW and not config.is_enabled(r.CODE, r.NAME, preview=True)
                                        and config.is_enabled(r.CODE, r.NAME)))
    try:
        if statistics:
            # the statistics replace what goes to stdout; outputs written to files are unchanged
            if all(target is not None for _, target in specs):
                specs = [*specs, ("concise", None)]
            stats = {name: _statistics(active, name) for name, target in specs if target is None}
            write_all(specs, findings, ctx, rendered=stats)
        else:
            write_all(specs, findings, ctx)
    except OutputError as exc:
        _fail(str(exc))
    if result.internal_error:
        sys.exit(EXIT_ERROR)
    if exit_zero:
        sys.exit(EXIT_CLEAN)
    sys.exit(EXIT_FINDINGS if any(config.fails(f.severity) for f in active) else EXIT_CLEAN)


def _use_color() -> bool:
    """Colour on a terminal; ``NO_COLOR`` (any value) turns it off, ``FORCE_COLOR`` on (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"


def _base_findings(diff, jobs_list, shortcuts: bool):
    """The findings the changed files had at the merge base, each under its path of today (so a
    renamed file's old findings still match)."""
    from kcheck.diff import base_text
    from kcheck.engine import check_source

    before = []
    for job in jobs_list:
        text = base_text(diff, Path(job.path))
        if text is None:
            continue
        before += check_source(text, job.rel, job.config, shortcuts, job.config_rel).findings
    return before


def _load_diff(ref: str, where: Path):
    from kcheck.diff import DiffError, load_diff

    try:
        return load_diff(ref, where)
    except DiffError as exc:
        _fail(f"--diff-base {ref}: {exc}")


def _hide(findings, root: Path, diff_base, diff, filter_mode: str, baseline_file, scanned, quiet: bool,
          before=()):
    """Findings left after the baseline and the diff filter, and the hidden ones with the reason."""
    from kcheck.reporters import BASELINED, OUTSIDE_DIFF

    hidden = []
    if baseline_file is not None:
        from kcheck.baseline import BaselineError, apply, load

        try:
            entries = load(baseline_file)
        except BaselineError as exc:
            _fail(str(exc))
        findings, baselined, stale = apply(findings, entries, scanned)
        hidden += [(f, BASELINED) for f in baselined]
        if stale and not quiet:
            click.echo(f"kcheck: {baseline_file}: {len(stale)} stale entr{'ies' if len(stale) != 1 else 'y'} "
                       "(fixed, or the line changed); run `kcheck baseline` to shrink it:", err=True)
            for entry in stale:
                click.echo(f"  {entry.describe()}", err=True)
    if diff_base:
        from kcheck.diff import split, split_new

        if diff is None:
            diff = _load_diff(diff_base, root)
        if filter_mode == "new":
            findings, outside = split_new(findings, before)
        else:
            findings, outside = split(findings, root, diff, filter_mode)
        hidden += [(f, OUTSIDE_DIFF) for f in outside if f.suppressed is None]
    return findings, hidden


def _statistics(findings, fmt: str) -> str:
    """Findings per rule, most first: a table, or JSON (a list of {code, name, count}) for json formats."""
    import json
    from collections import Counter

    counts = Counter((f.code, f.name) for f in findings)
    rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if fmt in ("json", "json-lines"):
        items = [{"code": code, "name": name, "count": n} for (code, name), n in rows]
        if fmt == "json-lines":
            return "".join(json.dumps(i) + "\n" for i in items)
        return json.dumps(items, indent=2) + "\n"
    lines = [f"{n:>6}  {code}  {name}" for (code, name), n in rows]
    return "\n".join(lines or ["no findings"]) + "\n"


@main.command("baseline")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, path_type=Path), default=Path("kcheck-baseline.json"),
              show_default=True, help="The baseline file to write.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Use this configuration file instead of the nearest one.")
@click.option("--extend-include", multiple=True, metavar="GLOB",
              help="Also read files matching GLOB as Python (e.g. '*.py.txt'); repeatable, on top of the config's.")
@click.option("--force-exclude", is_flag=True, help="Apply exclude patterns to files named on the command line too.")
def baseline_cmd(paths, output, config_file, extend_include, force_exclude) -> None:
    """Record today's findings in PATHS so that `kcheck check --baseline FILE` shows only new ones.

    Entries are keyed on path, rule, enclosing function and the normalised source line, not on
    line numbers, so code that moves stays baselined."""
    from kcheck.baseline import dumps, entries_for
    from kcheck.config import ConfigError
    from kcheck.engine import discover, scan
    from kcheck.reporters import OutputError, write_atomic

    try:
        jobs_list, problems = discover(list(paths), config_file, force_exclude, tuple(extend_include))
    except ConfigError as exc:
        _fail(str(exc))
    for p in problems:
        click.echo(f"kcheck: {p}", err=True)
    if problems and not jobs_list:
        sys.exit(EXIT_ERROR)
    result = scan(jobs_list)
    for err in result.errors:
        click.echo(f"kcheck: {err}", err=True)
    if result.internal_error:
        sys.exit(EXIT_ERROR)
    try:
        write_atomic(str(output), dumps(result.findings))
    except OutputError as exc:
        _fail(str(exc))
    active = [f for f in result.findings if f.suppressed is None]
    n = len(entries_for(active))
    click.echo(f"kcheck: wrote {n} entr{'ies' if n != 1 else 'y'} for {len(active)} finding{'s' if len(active) != 1 else ''} "
               f"in {result.files} file{'s' if result.files != 1 else ''} to {output}", err=True)


@main.command("comment")
@click.argument("results", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the comment here instead of stdout.")
def comment_cmd(results, output) -> None:
    """Render the pull-request summary comment from RESULTS, the output of `kcheck check
    --output-format json` ('-' reads stdin), exactly as the `markdown` format prints it."""
    from kcheck.finding import DEFAULT_DOCS_URL
    from kcheck.reporters import OutputError, render, write_atomic
    from kcheck.reporters.json import load

    text = sys.stdin.read() if results == "-" else Path(results).read_text(encoding="utf-8")
    try:
        shown, hidden = load(text, results)
    except ValueError as exc:
        _fail(str(exc))
    url = next((f.url for f, _ in [*((f, "") for f in shown), *hidden] if "/rules/" in f.url), "")
    docs_url = url[: url.index("/rules/") + 1] if url else DEFAULT_DOCS_URL
    body = render("markdown", shown, ReportContext(root=Path.cwd(), docs_url=docs_url, hidden=hidden))
    if output:
        try:
            write_atomic(output, body)
        except OutputError as exc:
            _fail(str(exc))
    else:
        click.echo(body, nl=False)


@main.command("rule")
@click.argument("key")
@click.option("--format", "--output-format", "fmt", type=click.Choice(["text", "json"]), default="text")
def rule_cmd(key: str, fmt: str) -> None:
    """Explain a rule (by code or name): its docs, examples and catalog entries."""
    from kcheck.explain import explain_rule

    text = explain_rule(key, fmt)
    if text is None:
        _fail(f"no rule {key!r}; `kcheck rules` lists them")
    click.echo(text)


@main.command("rules")
@click.option("--format", "--output-format", "fmt", type=click.Choice(["text", "json"]), default="text")
def rules_cmd(fmt: str) -> None:
    """List every rule; preview rules are marked (off unless --preview or selected by code or name)."""
    from kcheck.explain import list_rules

    click.echo(list_rules(fmt))

