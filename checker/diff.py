"""Changed lines from git, and the filter that keeps only the findings a change is responsible for.

``kcheck check --diff-base REF`` compares the work tree with the merge base of ``REF`` and ``HEAD``
(what a pull request or a branch adds on top of ``REF``). The work tree includes staged and
unstaged edits; pre-commit stashes the unstaged ones before it runs a hook, so there the change
is exactly what is staged. Renames are followed (a renamed file's unchanged lines are not
"added"), and the diff is computed from the repository's top level, so kcheck may run from any
subfolder.

Filter modes:

- ``new`` (the default): finding-level attribution, as Semgrep's baseline commit does it. The
  changed files are checked again as they were at the merge base, and a finding is the change's
  when the base did not have it (matched by fingerprint: path, rule, enclosing function and the
  normalised line, counted), whatever line it sits on. A change that moves ``end.record()`` so
  that an unchanged ``torch.cuda.synchronize()`` is now timed is reported; an old finding on a
  line the change merely touched is not.

Line modes, named as reviewdog names them:

- ``added``: findings whose first line the change adds or modifies;
- ``diff_context``: findings whose first line is inside a hunk, context lines included;
- ``file``: findings anywhere in a file the change touches;
- ``nofilter``: every finding.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

FILTER_MODES = ("new", "added", "diff_context", "file", "nofilter")
# git settings a user may have that change what ``git diff`` prints, pinned to what the parser
# reads: prefixes (diff.noprefix, diff.mnemonicPrefix, diff.srcPrefix/dstPrefix), paths relative
# to a subfolder (diff.relative), blank context lines without their space (diff.suppressBlankEmpty),
# external and text-conversion drivers, colour.
_PINNED = ("core.quotepath=off", "diff.noprefix=false", "diff.mnemonicPrefix=false", "diff.relative=false",
           "diff.suppressBlankEmpty=false", "diff.external=", "color.diff=false", "color.ui=false")
_DIFF_OPTIONS = ("--no-color", "--no-ext-diff", "--no-textconv", "--no-relative", "--src-prefix=a/",
                 "--dst-prefix=b/", "--find-renames")
CONTEXT_LINES = 3  # git's default hunk context: what ``diff_context`` counts as near the change
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's id of the empty tree
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class DiffError(Exception):
    """git could not produce the diff (not a repository, unknown ref, ...)."""


@dataclass
class FileChange:
    added: set[int] = field(default_factory=set)  # new-side lines the change adds or modifies
    context: set[int] = field(default_factory=set)  # new-side lines inside a hunk, context included
    old_path: str | None = None  # the path at the base (None: the change adds the file)
    known_old: bool = False  # whether ``old_path`` was read from the diff (else it is the same path)


@dataclass
class Diff:
    """The changed files of a repository, keyed by path relative to its top level."""

    top: Path
    base: str  # the commit compared against
    files: dict[str, FileChange] = field(default_factory=dict)

    def change_of(self, path: Path) -> FileChange | None:
        try:
            rel = path.resolve().relative_to(self.top).as_posix()
        except ValueError:
            return None
        return self.files.get(rel)

    def keeps(self, path: Path, line: int, mode: str, cell: int = 0) -> bool:
        """Whether a finding at ``path``:``line`` passes the filter ``mode``. A notebook's diff is of
        its JSON, whose lines are not the cells' (``cell``): any change to the notebook keeps it."""
        if mode == "nofilter":
            return True
        change = self.change_of(path)
        if change is None:
            return False
        if mode == "file" or cell:
            return True
        if mode == "diff_context":
            return line in change.context
        return line in change.added


def _git(args: list[str], cwd: Path, binary: bool = False):
    pinned = [arg for setting in _PINNED for arg in ("-c", setting)]
    try:
        proc = subprocess.run(["git", *pinned, *args], cwd=cwd, capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        raise DiffError(f"cannot run git: {exc}") from None
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise DiffError(message[-1] if message else f"git {' '.join(args)} failed")
    return proc.stdout if binary else proc.stdout.decode("utf-8", "surrogateescape")


def git_toplevel(folder: Path) -> Path | None:
    """The top of the git work tree that holds ``folder``, or None outside git."""
    try:
        return Path(_git(["rev-parse", "--show-toplevel"], folder).strip()).resolve()
    except DiffError:
        return None


def _unquote(path: str) -> str:
    """git writes a path with unusual characters as a C-style quoted string."""
    if not (path.startswith('"') and path.endswith('"')):
        return path
    raw = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    return raw.encode("latin-1").decode("utf-8", "surrogateescape")


def _resolve_base(ref: str, top: Path) -> str:
    """The commit to compare against: the merge base of ``ref`` and HEAD.

    In a repository without commits (a first commit through pre-commit) the base is the empty
    tree, so every staged line is added. In a shallow clone without the merge base, history is
    fetched deeper until it appears; when it cannot be found, DiffError says so (comparing with
    ``ref`` itself would blame the change for everything the base branch did since).
    """
    if ref.startswith("-"):
        raise DiffError(f"{ref!r} is not a git revision")
    try:
        _git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], top)
    except DiffError:
        if ref in ("HEAD", "@"):
            return EMPTY_TREE
        raise DiffError("the repository has no commits yet; only --diff-base HEAD works here") from None
    try:
        commit = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], top).strip()
    except DiffError:
        raise DiffError(f"unknown git revision {ref!r} (not fetched? in CI, check out with fetch-depth: 0)") from None
    for deepen in (None, "100", "1000", "unshallow"):
        if deepen is not None:
            if not _is_shallow(top):
                break
            try:
                _git(["fetch", "--quiet", "--no-tags", "--unshallow" if deepen == "unshallow" else f"--deepen={deepen}"], top)
            except DiffError:
                break
        try:
            return _git(["merge-base", commit, "HEAD"], top).strip()
        except DiffError:
            continue
    if _is_shallow(top):
        raise DiffError(f"this is a shallow clone and the merge base of {ref} and HEAD is not in it, nor could "
                        "more history be fetched; fetch the history (git fetch --unshallow, or fetch-depth: 0 "
                        "in actions/checkout)")
    raise DiffError(f"{ref} and HEAD have no common history (no merge base)")


def _is_shallow(top: Path) -> bool:
    try:
        return _git(["rev-parse", "--is-shallow-repository"], top).strip() == "true"
    except DiffError:
        return False


def parse_unified(text: str) -> dict[str, FileChange]:
    """Added and in-hunk lines per new-side path from ``git diff`` output."""
    files: dict[str, FileChange] = {}
    current: FileChange | None = None
    old: str | None = None  # the base-side path of the file being read
    line = old_left = new_left = 0
    for raw in text.split("\n"):
        if old_left > 0 or new_left > 0:  # inside a hunk: every line is content, whatever it starts with
            tag = raw[:1]
            if tag == "+" or tag == " ":
                if tag == "+":
                    current.added.add(line)
                line += 1
                new_left -= 1
            if tag == "-" or tag == " ":
                old_left -= 1
            continue
        if raw.startswith("diff --git "):
            current, old = None, None
        elif raw.startswith("rename from "):
            old = _unquote(raw[len("rename from "):])
        elif raw.startswith("rename to "):
            current = files.setdefault(_unquote(raw[len("rename to "):]), FileChange())
            current.old_path, current.known_old = old, True
        elif raw.startswith("--- "):
            source = raw[4:].rstrip("\t")
            source = None if source == "/dev/null" else _unquote(source)
            old = source[2:] if source and source.startswith("a/") else source
        elif raw.startswith("+++ "):
            target = raw[4:].rstrip("\t")
            if target == "/dev/null":
                current = None
            else:
                target = _unquote(target)
                current = files.setdefault(target[2:] if target.startswith("b/") else target, FileChange())
                current.old_path, current.known_old = old, True
        elif raw.startswith("@@") and current is not None:
            m = _HUNK.match(raw)
            if m:
                old_left = int(m.group(2)) if m.group(2) is not None else 1
                line = int(m.group(3))
                new_left = int(m.group(4)) if m.group(4) is not None else 1
                current.context.update(range(line, line + new_left))
    return files


def load_diff(ref: str, cwd: Path | None = None, context: int = CONTEXT_LINES) -> Diff:
    """What the work tree changes since the merge base of ``ref`` and HEAD, in the repository
    that holds ``cwd``. Untracked (not ignored) files count as entirely added."""
    top = git_toplevel(Path(cwd or Path.cwd()))
    if top is None:
        raise DiffError(f"{cwd or Path.cwd()} is not inside a git repository")
    base = _resolve_base(ref, top)
    text = _git(["diff", *_DIFF_OPTIONS, f"--unified={context}", base, "--"], top)
    diff = Diff(top=top, base=base, files=parse_unified(text))
    untracked = _git(["ls-files", "-z", "--others", "--exclude-standard"], top)
    for rel in filter(None, untracked.split("\0")):
        if rel in diff.files:
            continue
        try:
            n = len((top / rel).read_bytes().splitlines())
        except OSError:
            continue
        lines = set(range(1, n + 1))
        diff.files[rel] = FileChange(added=set(lines), context=lines, known_old=True)
    return diff


def base_text(diff: Diff, path: Path) -> str | None:
    """The text at the merge base of the file at ``path`` (followed through a rename), or None
    when the base has no such file or it is not UTF-8."""
    change = diff.change_of(path)
    if change is None:
        return None
    try:
        rel = path.resolve().relative_to(diff.top).as_posix()
    except ValueError:
        return None
    old = change.old_path if change.known_old else rel
    if old is None or diff.base == EMPTY_TREE:
        return None
    try:
        data = _git(["cat-file", "blob", f"{diff.base}:{old}"], diff.top, binary=True)
    except DiffError:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def split_new(findings, before) -> tuple[list, list]:
    """(new, old) findings: a finding is new when the base had fewer findings with its
    fingerprint than there are now (``before``: the base's findings of the same files)."""
    from collections import Counter

    from kcheck.baseline import spend

    return spend(findings, Counter(f.fingerprint for f in before if f.suppressed is None))


def split(findings, root: Path, diff: Diff, mode: str):
    """(kept, hidden) findings under a line filter ``mode``; finding paths are relative to ``root``."""
    kept, hidden = [], []
    for f in findings:
        (kept if diff.keeps(root / f.path, f.line, mode, f.cell) else hidden).append(f)
    return kept, hidden
