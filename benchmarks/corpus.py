"""The yardstick's trees and fixes: read the manifest, check the split, fetch outside the repository.

    python benchmarks/corpus.py list                      # every tree: split, kind, source
    python benchmarks/corpus.py fetch DEST                # every tree and fix, into DEST
    python benchmarks/corpus.py fetch DEST --tree lmdeploy --tree fixes
    MIRROR=DIR python benchmarks/corpus.py fetch DEST     # git from local bare mirrors DIR/<owner>+<name>/repo

Trees come from ``benchmarks/corpus.yaml``: a registry release through ``pip download`` (its
sha256 checked) or a git commit. Fixes come from ``benchmarks/labels/fixes.yaml``: for each merged
fix, the file before the fix (``DEST/fixes/<id>/pre/<path>``) and after it (``.../post/<path>``),
read from git. Nothing fetched is ever written inside the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "corpus.yaml"
FIXES = HERE / "labels" / "fixes.yaml"


class ManifestError(Exception):
    pass


def hash_split(name: str, salt: str) -> str:
    """The split rule written in the manifest: 5 of 8 hash buckets are test."""
    h = int(hashlib.sha256((salt + name).encode()).hexdigest()[:8], 16)
    return "test" if h % 8 < 5 else "dev"


def load_manifest(path: Path = MANIFEST) -> list[dict]:
    data = yaml.safe_load(path.read_text())
    salt = data["split_salt"]
    trees = data["trees"]
    seen = set()
    for t in trees:
        name = t["name"]
        if name in seen:
            raise ManifestError(f"{path}: tree {name!r} listed twice")
        seen.add(name)
        rule = t.get("split_rule", "hash")
        if rule == "hash" and t["split"] != hash_split(name, salt):
            raise ManifestError(f"{path}: tree {name!r} says split {t['split']!r}, the hash rule says "
                                f"{hash_split(name, salt)!r}")
        if rule not in ("hash", "fitted-before-split", "moved-to-dev"):
            raise ManifestError(f"{path}: tree {name!r} has unknown split_rule {rule!r}")
    return trees


def load_fixes(path: Path = FIXES) -> list[dict]:
    if not path.exists():
        return []
    return yaml.safe_load(path.read_text()).get("fixes", []) or []


def _run(*cmd: str, cwd: str | None = None) -> bytes:
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True).stdout


def _git_dir(repo: str, commits: list[str], work: Path) -> str:
    """A git directory holding ``commits`` of ``repo``: a local mirror or a shallow fetch."""
    mirror = os.environ.get("MIRROR")
    if mirror:
        d = Path(mirror) / repo.replace("/", "+") / "repo"
        if d.exists():
            return str(d)
    d = work / repo.replace("/", "+")
    if not d.exists():
        d.mkdir(parents=True)
        _run("git", "init", "-q", "--bare", str(d))
    for c in commits:
        _run("git", "-C", str(d), "fetch", "-q", "--depth", "2", f"https://github.com/{repo}", c)
    return str(d)


def _fetch_pypi(src: dict, folder: Path, dl: Path) -> None:
    archive = dl / src["file"]
    if not archive.exists():
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dl)]
        if archive.name.endswith(".whl"):
            cmd += ["--only-binary", ":all:", "--python-version", "3.11"]
            tag = archive.name[:-4].split("-")[-1]
            for plat in tag.split("."):
                cmd += ["--platform", plat]
        else:
            cmd += ["--no-binary", ":all:", "--no-build-isolation"]
        cmd.append(src["pypi"])
        env = dict(os.environ, FLASH_ATTENTION_SKIP_CUDA_BUILD="TRUE")
        subprocess.run(cmd, check=True, env=env)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != src["sha256"]:
        raise ManifestError(f"{archive.name}: sha256 {digest}, the manifest says {src['sha256']}")
    folder.mkdir(parents=True, exist_ok=True)
    only = src.get("only")
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            for n in z.namelist():
                if n.endswith(".py") and (not only or n.startswith(only + "/")):
                    z.extract(n, folder)
    else:
        with tarfile.open(archive) as t:
            members = [m for m in t.getmembers() if m.isfile() and m.name.endswith((".py", ".toml"))]
            for m in members:  # drop the sdist's top folder (name-version/)
                m.name = m.name.split("/", 1)[1] if "/" in m.name else m.name
            t.extractall(folder, members=members, filter="data")


def _fetch_git(src: dict, folder: Path, work: Path) -> None:
    repo = src.get("mirror") if os.environ.get("MIRROR") and src.get("mirror") else src["git"]
    gd = _git_dir(repo, [src["commit"]], work)
    folder.mkdir(parents=True, exist_ok=True)
    archive = _run("git", "-C", gd, "archive", src["commit"], "--", *src.get("paths", ["."]))
    with tempfile.TemporaryFile() as fh:
        fh.write(archive)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as t:
            t.extractall(folder, filter="data")


def fetch_fix(fix: dict, dest: Path, work: Path) -> None:
    """The fixed file before (the fix commit's first parent) and after the fix."""
    gd = _git_dir(fix["repo"], [fix["commit"]], work)
    for side, rev in (("pre", fix["commit"] + "^"), ("post", fix["commit"])):
        out = dest / "fixes" / fix["id"] / side / fix["path"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(_run("git", "-C", gd, "show", f"{rev}:{fix['path']}"))


def fetch(dest: Path, only: set[str] | None = None) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    repo_root = HERE.parent.resolve()
    if dest.resolve().is_relative_to(repo_root):
        raise ManifestError(f"{dest}: fetch outside the repository; third-party code is never committed")
    dl, work = dest / "dl", dest / "git"
    dl.mkdir(exist_ok=True)
    for t in load_manifest():
        if only and t["name"] not in only:
            continue
        folder = dest / t["name"]
        if folder.exists():
            print(f"{t['name']:<32} present")
            continue
        tmp = dest / (t["name"] + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        src = t["source"]
        if "pypi" in src:
            _fetch_pypi(src, tmp, dl)
        else:
            _fetch_git(src, tmp, work)
        tmp.rename(folder)  # a tree is there whole or not at all
        print(f"{t['name']:<32} {sum(1 for _ in folder.rglob('*.py')):6d} files")
    if not only or "fixes" in only:
        for fix in load_fixes():
            fetch_fix(fix, dest, work)
        print(f"{'fixes':<32} {len(load_fixes()):6d} fixes")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    f = sub.add_parser("fetch")
    f.add_argument("dest", type=Path)
    f.add_argument("--tree", action="append", help="only these trees ('fixes' for the fixes)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "list":
            for t in load_manifest():
                src = t["source"]
                where = src.get("pypi") or f"{src['git']}@{src['commit'][:12]}"
                print(f"{t['name']:<32} {t['split']:<5} {t['kind']:<16} {where}")
        else:
            fetch(args.dest, set(args.tree) if args.tree else None)
    except (ManifestError, subprocess.CalledProcessError, OSError) as e:
        print(f"corpus: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
