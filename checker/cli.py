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

    def __init__(self, total: int) -> None:
        import time

        self.total, self.done, self.start, self.time = total, 0, time.monotonic(), time.monotonic
        self.enabled = sys.stderr.isatty() and not os.environ.get("CI") and total > 50
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
              help=f"Output format, optionally written to FILE; repeatable. One of: {', '.join(FORMATS)}.")
@click.option("--select", multiple=True, help="Rules to enable (codes, prefixes, names, ALL); replaces the config's.")
@click.option("--extend-select", multiple=True, help="Rules to enable on top of the selection.")
@click.option("--ignore", multiple=True, help="Rules to disable.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Use this configuration file instead of the nearest one.")
@click.option("--fail-level", type=click.Choice(["info", "warning", "error"]),
              help="Lowest severity that makes kcheck exit 1 (default: info, any finding).")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: all cores).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache (.kcheck_cache/).")
@click.option("--no-shortcuts", is_flag=True,
              help="Run every rule on every file: no prefilter, no gate, no cache (slow; for checking kcheck).")
@click.option("--stdin-filename", help="The file name to report for source read from '-'.")
@click.option("--force-exclude", is_flag=True, help="Apply exclude patterns to files named on the command line too.")
@click.option("--statistics", is_flag=True, help="Print the number of findings per rule instead of the findings.")
@click.option("--diff-base", metavar="REF",
              help="Report only what the change since the merge base of REF and HEAD is responsible for.")
@click.option("--filter-mode", type=click.Choice(["added", "diff_context", "file", "nofilter"]),
              help="With --diff-base: findings on added lines (default), in diff hunks, in changed files, or all.")
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Hide the findings recorded in this baseline file (written by `kcheck baseline`).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on stderr but errors.")
def check(paths, formats, select, extend_select, ignore, config_file, fail_level, exit_zero, jobs, no_cache,
          no_shortcuts, stdin_filename, force_exclude, statistics, diff_base, filter_mode, baseline_file,
          quiet) -> None:
    """Check PATHS (files or folders; '-' reads stdin) for serving-kernel mistakes."""
    from kcheck.config import ConfigError
    from kcheck.engine import discover, scan, scan_stdin, stdin_job

    specs = [parse_spec(s) for s in formats] or [("concise", None)]
    for name, _ in specs:
        if name not in FORMATS:
            _fail(f"unknown output format {name!r}; choose from: {', '.join(FORMATS)}")
    if filter_mode and not diff_base:
        _fail("--filter-mode needs --diff-base REF")
    filter_mode = filter_mode or "added"
    diff = None
    overrides = {"select": _split(select), "extend_select": _split(extend_select), "ignore": _split(ignore),
                 "fail_level": fail_level}
    try:
        if paths == ("-",):
            jobs_list = [stdin_job(stdin_filename or "stdin.py", config_file)]
        else:
            jobs_list, problems = discover(list(paths), config_file, force_exclude)
            for p in problems:
                click.echo(f"kcheck: {p}", err=True)
            if problems and not jobs_list:
                sys.exit(EXIT_ERROR)
        jobs_list = [replace(j, config=j.config.with_overrides(**overrides)) for j in jobs_list]
        if paths == ("-",):
            result = scan_stdin(sys.stdin.read(), jobs_list[0])
        else:
            if diff_base:
                diff = _load_diff(diff_base, Path(jobs_list[0].root) if jobs_list else Path.cwd())
                if filter_mode != "nofilter":  # only files the change touches can have findings to show
                    jobs_list = [j for j in jobs_list if diff.change_of(Path(j.path)) is not None]
            progress = _Progress(len(jobs_list))
            result = scan(jobs_list, jobs, shortcuts=not no_shortcuts, cache=not no_cache, progress=progress)
            progress.close()
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
                             None if paths == ("-",) else {j.rel for j in jobs_list}, quiet)
    active = [f for f in findings if f.suppressed is None]
    ctx = ReportContext(root=root, docs_url=config.docs_url, files=result.files, hidden=hidden)
    if statistics:
        _print_statistics(active)
    else:
        write_all(specs, findings, ctx)
    if result.internal_error:
        sys.exit(EXIT_ERROR)
    if exit_zero:
        sys.exit(EXIT_CLEAN)
    sys.exit(EXIT_FINDINGS if any(config.fails(f.severity) for f in active) else EXIT_CLEAN)


def _load_diff(ref: str, where: Path):
    from kcheck.diff import DiffError, load_diff

    try:
        return load_diff(ref, where)
    except DiffError as exc:
        _fail(f"--diff-base {ref}: {exc}")


def _hide(findings, root: Path, diff_base, diff, filter_mode: str, baseline_file, scanned, quiet: bool):
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
        from kcheck.diff import split

        if diff is None:
            diff = _load_diff(diff_base, root)
        findings, outside = split(findings, root, diff, filter_mode)
        hidden += [(f, OUTSIDE_DIFF) for f in outside if f.suppressed is None]
    return findings, hidden


def _print_statistics(findings) -> None:
    from collections import Counter

    counts = Counter((f.code, f.name) for f in findings)
    for (code, name), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        click.echo(f"{n:>6}  {code}  {name}")
    if not counts:
        click.echo("no findings")


@main.command("baseline")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, path_type=Path), default=Path("kcheck-baseline.json"),
              show_default=True, help="The baseline file to write.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Use this configuration file instead of the nearest one.")
@click.option("--force-exclude", is_flag=True, help="Apply exclude patterns to files named on the command line too.")
def baseline_cmd(paths, output, config_file, force_exclude) -> None:
    """Record today's findings in PATHS so that `kcheck check --baseline FILE` shows only new ones.

    Entries are keyed on path, rule, enclosing function and the normalised source line, not on
    line numbers, so code that moves stays baselined."""
    from kcheck.baseline import dumps, entries_for
    from kcheck.config import ConfigError
    from kcheck.engine import discover, scan
    from kcheck.reporters import write_atomic

    try:
        jobs_list, problems = discover(list(paths), config_file, force_exclude)
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
    write_atomic(str(output), dumps(result.findings))
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
    from kcheck.reporters import render, write_atomic
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
        write_atomic(output, body)
    else:
        click.echo(body, nl=False)


@main.command("rule")
@click.argument("key")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def rule_cmd(key: str, fmt: str) -> None:
    """Explain a rule (by code or name): its docs, examples and catalog entries."""
    from kcheck.explain import explain_rule

    text = explain_rule(key, fmt)
    if text is None:
        _fail(f"no rule {key!r}; `kcheck rules` lists them")
    click.echo(text)


@main.command("rules")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def rules_cmd(fmt: str) -> None:
    """List every rule."""
    from kcheck.explain import list_rules

    click.echo(list_rules(fmt))

