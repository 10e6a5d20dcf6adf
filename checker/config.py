"""Configuration: ``[tool.kcheck]`` in pyproject.toml, or kcheck.toml.

The nearest configuration file above a path wins; ``extend`` inherits from another file;
``root = true`` marks the project root. Every file is validated against
``schemas/config.schema.json`` and a bad key or value is a :class:`ConfigError` naming the
file, the key and what is allowed.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from kcheck.finding import DEFAULT_DOCS_URL, severity_rank

CONFIG_FILES = ("kcheck.toml", "pyproject.toml")
DEFAULT_MAX_FILE_SIZE = 4 * 1024 * 1024
UNPARSABLE = "KC900"  # reported whatever the selection: a file that does not parse was not checked

DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", ".kcheck_cache",
    "build", "dist", "site", "node_modules", "*.egg-info", ".mypy_cache", ".pytest_cache",
)
DEFAULT_HOT_PATHS = (
    "forward", "forward_cuda", "forward_hip", "forward_xpu", "_forward", "forward_impl",
    "decode", "decode_step", "*_decode_step", "step", "execute_model", "build_metadata",
    "prepare_decode", "sample",
    # per-step by the engines' interfaces: an attention backend's metadata for each batch (SGLang),
    # a metadata builder's build (vLLM), a MoE kernel's or quantised MoE method's apply, fast
    # inference and micro-batch forwards; "Cls.m" patterns match a method by its class's name too
    "init_forward_metadata", "init_forward_metadata_replay*", "*MetadataBuilder.build", "*Experts.apply", "*MoEMethod.apply",
    "*_fast_forward_inference", "forward_microbatch",
)


class ConfigError(Exception):
    """A configuration file that kcheck cannot use; the message names file and key."""


@dataclass(frozen=True)
class Config:
    """Resolved settings for one project folder (immutable, hashable, picklable)."""

    root: Path = field(default_factory=Path.cwd)
    source: str = ""  # the file these settings came from, or "" for defaults
    select: tuple[str, ...] = ("ALL",)
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    extend_include: tuple[str, ...] = ()  # globs of files read as Python beside the source suffixes
    severity: tuple[tuple[str, str], ...] = ()
    fail_level: str = "info"
    kernel_paths: tuple[str, ...] = ()
    hot_path_functions: tuple[str, ...] = DEFAULT_HOT_PATHS
    # Set per file by the engine from the project index (kcheck.project), never by users: this
    # file's functions ("f", "Cls.m") reached every step from a hot path in another function, with why.
    per_step: tuple[tuple[str, str], ...] = ()
    # Set per file by the engine from the project index: lazy initialisers ("f", "Cls.m") and the
    # index of their guard statement; what follows the guard runs once, on the first call.
    once_after: tuple[tuple[str, int], ...] = ()
    # Set per file by the engine from the project index: the call texts in this file of project
    # functions that time something (a benchmark driver's ``interleaved(fns, rounds, timer)``).
    measuring: tuple[str, ...] = ()
    # Set per file by the engine from the project index: names imported from another module of the
    # project that are numeric constants there (``from .ops import BLOCK``).
    constants: tuple[str, ...] = ()
    # Set per file by the engine from the project index: (function, option) for the parameters
    # defaulting to False that no caller in the project turns on (``check_inputs=False``).
    options_off: tuple[tuple[str, str], ...] = ()
    # Set per file by the engine from the project index: (function, parameter) for the parameters
    # every caller in the project passes a host array (``f(lens_cpu)``).
    host_params: tuple[tuple[str, str], ...] = ()
    # Set per file by the engine from the project index: (function, parameter) for the parameters
    # defaulting to None that every caller in the project passes a value (``given_params``).
    given_params: tuple[tuple[str, str], ...] = ()
    # Set per file by the engine from the project index: (function, call text, demands) for the calls
    # whose callee's checks demand something of their arguments (``kcheck.contracts.call_demands``).
    demands: tuple[tuple[str, str, tuple[tuple[int, str, str, str], ...]], ...] = ()
    # Set per file by the engine from the project index: why each function of this file (by its
    # dotted scope name; "*" for all of them) is not serving code, and where its loops over steps are
    # (their places among its own loop statements); ``indexed`` says the index answered for this file.
    contexts: tuple[tuple[str, str], ...] = ()
    # Set per file by the engine from the project index: the task file this one repeats word for word
    # (``kcheck.project.copies``): a solution folder's copy of the task's reference is no solution.
    copy_of: str = ""
    # Set per file by the engine from the project index: the names this file imports from a module of
    # the project whose import loads a kernel (``kcheck.project.kernel_loading``).
    kernel_imports: tuple[str, ...] = ()
    # Set per file by the engine from the project index: what it imports (qualified) from project
    # modules that have nothing to do with kernels (``kcheck.project.kernel_loading``), whatever
    # their names say.
    plain_imports: tuple[str, ...] = ()
    # Set per file by the engine from the project index: its top-level functions that some function
    # of the project calls by name (``kcheck.project.called_plainly``): a Triton one is a device helper.
    called_plainly: tuple[str, ...] = ()
    # Set per file by the engine from the project index: its top-level names (flags, probes, imported
    # kernels) that other modules import and read, each with how the least careful of them reads it:
    # "said", "used" or "silent" (``kcheck.project.read_elsewhere``).
    read_elsewhere: tuple[tuple[str, str], ...] = ()
    # Set per file by the engine from the project index: the test or benchmark script beside this
    # module that is the only one to import it (``kcheck.project.harness_modules``), or "".
    harness: str = ""
    # Set per file by the engine from the project index: the names it imports that are project functions
    # launching a kernel in their own body (``kcheck.project.kernel_loading``): calling one is a launch.
    kernel_entries: tuple[str, ...] = ()
    step_loops: tuple[tuple[str, tuple[int, ...]], ...] = ()
    indexed: bool = False
    library_ops: tuple[str, ...] = ()
    fallback_announcers: tuple[str, ...] = ()
    require_suppression_reason: bool = True
    docs_url: str = DEFAULT_DOCS_URL
    # run the rules marked ``PREVIEW`` too (``--preview``, ``preview = true``, or ``KCHECK_PREVIEW=1``
    # in the environment, which a configuration file's ``preview`` and the command line override)
    preview: bool = field(default_factory=lambda: os.environ.get("KCHECK_PREVIEW", "").lower() in ("1", "true", "yes"))
    max_file_size: int = DEFAULT_MAX_FILE_SIZE  # bytes; larger files are reported as skipped, not checked

    # -- rule selection -------------------------------------------------------------------

    def is_enabled(self, code: str, name: str, path: str | None = None, preview: bool = False) -> bool:
        """Whether a rule runs (for ``path``, when given, per-file-ignores apply too).

        ``preview`` says the rule is a preview rule: it runs only when the configuration turns
        previews on, or when ``select``/``extend-select`` name it by code or name (a prefix such
        as ``KC4`` or ``ALL`` does not enable it, as in ruff). ``KC900`` (a file that does not
        parse) is on whatever is selected: a file kcheck could not read is never a silent pass;
        only ignoring it by its own code or name turns it off.
        """
        if code == UNPARSABLE:
            return not _names_exactly(self.ignore, code, name)
        if preview and not self.preview:
            chosen = _names_exactly(self.select, code, name) or _names_exactly(self.extend_select, code, name)
        else:
            chosen = _matches_any(self.select, code, name) or _matches_any(self.extend_select, code, name)
        if not chosen or _matches_any(self.ignore, code, name):
            return False
        if path is not None:
            for pattern, selectors in self.per_file_ignores:
                if _glob_match(path, pattern) and _matches_any(selectors, code, name):
                    return False
        return True

    def severity_of(self, code: str, name: str, default: str) -> str:
        for key, level in self.severity:
            if key in (code, name):
                return level
        return default

    def fails(self, severity: str) -> bool:
        return severity_rank(severity) >= severity_rank(self.fail_level)

    def is_excluded(self, rel_path: str, given: str = "") -> bool:
        """Whether exclude patterns match ``rel_path``. ``given`` is a folder named on the command
        line: patterns that match it (or its parents) do not apply below it, since the user asked for it."""
        parts = rel_path.split("/")
        skip = len(given.split("/")) if given and given != "." else 0
        bare, slashed = _exclusion(tuple(self.exclude + self.extend_exclude), given if skip else "")
        below = "/".join(parts[skip:])
        if bare is not None and below and bare.match_file(os.path.normcase(below)):
            return True
        return slashed is not None and slashed.match_file(os.path.normcase(rel_path))

    def is_hot_path(self, function_name: str) -> bool:
        """Whether ``function_name`` ("m", or "Cls.m" and deeper) matches a hot-path pattern: by its
        last part, or, for a "Cls.m" pattern, by its last two."""
        match = hot_path_matcher(self.hot_path_functions)
        parts = function_name.split(".")
        return match(parts[-1]) is not None or len(parts) > 1 and match(".".join(parts[-2:])) is not None

    def is_kernel_path(self, rel_path: str) -> bool:
        return any(_glob_match(rel_path, p) for p in self.kernel_paths)

    def fingerprint(self) -> str:
        """A stable digest of everything that can change findings (for the result cache)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("root", "source")}
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def with_overrides(self, **changes) -> "Config":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


@lru_cache(maxsize=8)
def hot_path_matcher(patterns: tuple[str, ...]):
    """``hot-path-functions`` as one compiled regex: ``fnmatchcase`` of any pattern, in one match."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or "(?!)").match


def _names_exactly(selectors: tuple[str, ...], code: str, name: str) -> bool:
    return any(s == code or s == name for s in selectors)


def _matches_any(selectors: tuple[str, ...], code: str, name: str) -> bool:
    for s in selectors:
        if s == "ALL" or s == name or (s.startswith("KC") and code.startswith(s)):
            return True
    return False


def unknown_selector_errors(selectors, where: str, prefixes: bool = True) -> list[str]:
    """One message per selector that names no rule (with the closest valid ones), for ``where``
    (a configuration key or a command-line option). ``prefixes``: code prefixes and ALL are allowed."""
    from kcheck.registry import all_rules

    rules = all_rules()
    codes = [r.CODE for r in rules]
    names = [r.NAME for r in rules]
    out = []
    for s in selectors:
        if s in codes or s in names:
            continue
        if prefixes and (s == "ALL" or (s.startswith("KC") and any(c.startswith(s) for c in codes))):
            continue
        pool = names if not s.upper().startswith("KC") else codes + (
            sorted({c[:3] for c in codes}) if prefixes else [])
        close = difflib.get_close_matches(s.upper() if s.upper().startswith("KC") else s, pool, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else "; `kcheck rules` lists them"
        kind = "rule code, name or prefix" if prefixes else "rule code or name"
        out.append(f"{where}: {s!r} is not a {kind}{hint}")
    return out


def check_selection(config: "Config", origin: str) -> None:
    """ConfigError for every selector of ``config`` that names no rule (``origin``: the file)."""
    errors = []
    for key, values in (("select", config.select), ("extend-select", config.extend_select),
                        ("ignore", config.ignore)):
        errors += unknown_selector_errors(values, f"{origin}: key {key!r}")
    for glob, values in config.per_file_ignores:
        errors += unknown_selector_errors(values, f"{origin}: key 'per-file-ignores' ({glob!r})")
    errors += unknown_selector_errors([k for k, _ in config.severity], f"{origin}: key 'severity'", prefixes=False)
    if errors:
        raise ConfigError("\n".join(errors))


@lru_cache(maxsize=64)
def _exclusion(patterns: tuple[str, ...], given: str):
    """For ``Config.is_excluded``: the gitignore-style matchers of the patterns that apply (those
    matching ``given``, a folder named on the command line, do not): one for the patterns without
    a ``/`` inside, matched against the path below ``given``, and one for the others, matched
    against the whole path."""
    active = [p for p in patterns if not (given and _glob_match(given, p))]
    if not active:
        return None, None
    bare = [p for p in active if "/" not in p.rstrip("/")]
    slashed = [p for p in active if "/" in p.rstrip("/")]
    return (_spec(tuple(bare)) if bare else None), (_spec(tuple(slashed)) if slashed else None)


@lru_cache(maxsize=1024)
def _spec(patterns: tuple[str, ...]):
    """A gitignore-style matcher (``pathspec``): ``*`` stays within one folder, ``**`` crosses
    folders, a bare name matches at any depth, a pattern with a ``/`` is anchored at the
    configuration's folder, and a folder's pattern matches everything below it."""
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines([os.path.normcase(p.rstrip("/")) for p in patterns])


def _glob_match(rel_path: str, pattern: str) -> bool:
    return _spec((pattern,)).match_file(os.path.normcase(rel_path))


# -- loading ----------------------------------------------------------------------------------


def _read_table(path: Path) -> dict | None:
    """The kcheck table of a config file, or None when a pyproject.toml has none.

    Parsed once per file version: discovery asks about the same pyproject.toml for every
    folder beneath it (1,506 parses of vLLM's during one discovery before this cache).
    """
    try:
        info = path.stat()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    return _parse_table(path, info.st_mtime_ns, info.st_size)


@lru_cache(maxsize=256)
def _parse_table(path: Path, mtime_ns: int, size: int) -> dict | None:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    if path.name == "pyproject.toml":
        return data.get("tool", {}).get("kcheck")
    return data


def _validate(table: dict, path: Path) -> None:
    from kcheck.paths import data_dir

    schema_text = (data_dir("schemas") / "config.schema.json").read_text()
    # A table already found valid against this schema is not validated again: importing
    # jsonschema costs more than a one-file pre-commit run should.
    stamp = _valid_stamp(schema_text, table)
    if stamp is not None and stamp.exists():
        return
    import jsonschema

    schema = json.loads(schema_text)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(table), key=lambda e: list(e.absolute_path))
    if not errors:
        _remember_valid(schema_text, table)
        return
    lines = []
    for err in errors:
        key = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        if err.validator == "additionalProperties" and not err.absolute_path:
            allowed = ", ".join(sorted(schema["properties"]))
            unknown = sorted(set(table) - set(schema["properties"]))
            lines.append(f"{path}: unknown key {', '.join(map(repr, unknown))}; allowed keys: {allowed}")
            continue
        sub = _subschema(schema, list(err.absolute_path))
        hint = f" ({sub['description']})" if sub and "description" in sub else ""
        lines.append(f"{path}: key {key!r}: {err.message}{hint}")
    raise ConfigError("\n".join(lines))


# ``kcheck check --no-cache`` sets this False: then nothing is read from or written to any cache.
USE_USER_CACHE = True


def user_cache_dir() -> Path:
    """kcheck's folder in the user's cache location (``platformdirs``: ~/.cache/kcheck on Linux,
    ~/Library/Caches/kcheck on macOS, %LOCALAPPDATA%\\kcheck\\Cache on Windows)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("kcheck", appauthor=False))


def _valid_stamp(schema_text: str, table: dict) -> Path | None:
    """Where a note that this table passed validation lives (in the user cache folder); None
    when caches are off."""
    if not USE_USER_CACHE:
        return None
    digest = hashlib.sha256((schema_text + json.dumps(table, sort_keys=True, default=str)).encode()).hexdigest()
    return user_cache_dir() / "valid-config" / digest


def _remember_valid(schema_text: str, table: dict) -> None:
    stamp = _valid_stamp(schema_text, table)
    if stamp is None:
        return
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
    except OSError:
        pass


def _subschema(schema: dict, path: list) -> dict | None:
    node = schema
    for part in path:
        if not isinstance(part, str):
            continue
        props = node.get("properties", {})
        node = props.get(part) or node.get("additionalProperties")
        if not isinstance(node, dict):
            return None
        if "$ref" in node:
            ref = node["$ref"].split("/")[-1]
            node = {**schema["$defs"][ref], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _apply(config: Config, table: dict, path: Path) -> Config:
    changes: dict = {"source": str(path)}
    for key, value in table.items():
        attr = key.replace("-", "_")
        if key in ("root", "extend"):
            continue
        if key == "per-file-ignores":
            value = tuple((glob, tuple(sel)) for glob, sel in value.items())
        elif key == "severity":
            value = tuple(value.items())
        elif isinstance(value, list):
            value = tuple(value)
        changes[attr] = value
    return replace(config, **changes)


def load_file(path: Path, _seen: tuple[Path, ...] = ()) -> Config:
    """Settings from one configuration file, following ``extend``."""
    path = path.resolve()
    if path in _seen:
        raise ConfigError(f"{path}: 'extend' forms a cycle: {' -> '.join(map(str, _seen + (path,)))}")
    table = _read_table(path)
    if table is None:
        raise ConfigError(f"{path}: has no [tool.kcheck] table")
    _validate(table, path)
    base = Config(root=path.parent)
    if "extend" in table:
        parent = (path.parent / os.path.expanduser(table["extend"])).resolve()
        if not parent.is_file():
            raise ConfigError(f"{path}: key 'extend': file {table['extend']!r} not found")
        base = replace(load_file(parent, _seen + (path,)), root=path.parent)
    config = _apply(base, table, path)
    check_selection(config, str(path))
    return config


@lru_cache(maxsize=4096)
def find_config_file(folder: Path) -> Path | None:
    """The nearest kcheck.toml or pyproject.toml with a [tool.kcheck] table at or above ``folder``:
    its own candidates, then its parent's cached answer (each folder of a tree is looked at once)."""
    for name in CONFIG_FILES:
        candidate = folder / name
        if candidate.is_file() and (name == "kcheck.toml" or _has_table(candidate)):
            return candidate
    parent = folder.parent
    return None if parent == folder else find_config_file(parent)


def _has_table(pyproject: Path) -> bool:
    try:
        return _read_table(pyproject) is not None
    except ConfigError:
        return True  # report the broken file when it is loaded


@lru_cache(maxsize=1024)
def config_for(directory: Path, explicit: Path | None = None) -> Config:
    """The settings that apply to files in ``directory`` (an explicit ``--config`` wins)."""
    if explicit is not None:
        return load_file(explicit)
    found = find_config_file(directory.resolve())
    if found is None:
        return Config(root=project_root(directory))
    return load_file(found)


def project_root(directory: Path) -> Path:
    """The folder report paths are relative to: a config with root = true, else the git top level,
    else the current folder when ``directory`` lies inside it (``kcheck check runs/a/x.py`` keeps
    ``runs/a/`` in the path that rules and reports see), else ``directory`` itself."""
    directory = directory.resolve()
    found = _root_at_or_above(directory)
    if found is not None:
        return found
    cwd = Path.cwd().resolve()
    return cwd if cwd == directory or cwd in directory.parents else directory


@lru_cache(maxsize=4096)
def _root_at_or_above(folder: Path) -> Path | None:
    for name in CONFIG_FILES:
        candidate = folder / name
        if candidate.is_file():
            try:
                table = _read_table(candidate)
            except ConfigError:
                table = None
            if table and table.get("root") is True:
                return folder
    if (folder / ".git").exists():
        return folder
    parent = folder.parent
    return None if parent == folder else _root_at_or_above(parent)


def clear_caches() -> None:
    """Forget discovered configuration files (for long-lived processes and tests)."""
    for cached in (find_config_file, config_for, _root_at_or_above):
        cached.cache_clear()
