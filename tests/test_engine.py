"""The scan engine: discovery, exclusion, git-awareness, stdin, the result cache, worker processes,
and the promise that the shortcuts (prefilter, gates, cache) never change what is found."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BENCH, REPO
from kcheck import engine
from kcheck.config import config_for
from kcheck.engine import discover, scan



def _rels(paths: list[str], **options) -> list[str]:
    jobs, problems = discover(paths, **options)
    assert not problems, problems
    return sorted(j.rel for j in jobs)


def _keys(result) -> list[tuple]:
    return [(f.path, f.line, f.column, f.code, f.message) for f in result.findings]


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# -- discovery ------------------------------------------------------------------------------------


def test_discovery_walks_python_files_and_skips_default_excludes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"a.py": "", "pkg/b.py": "", "pkg/c.pyi": "", "notes.txt": "", "build/gen.py": "",
                      ".venv/lib/site.py": "", "pkg/__pycache__/x.py": "", "node_modules/m.py": ""})
    assert _rels(["."]) == ["a.py", "pkg/b.py", "pkg/c.pyi"]


def test_config_exclude_applies_to_folders_but_not_to_named_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"pyproject.toml": '[tool.kcheck]\nroot = true\nextend-exclude = ["gen", "*_pb2.py"]\n',
                      "a.py": "", "gen/big.py": "", "pkg/m_pb2.py": "", "pkg/m.py": ""})
    assert _rels(["."]) == ["a.py", "pkg/m.py"]
    assert _rels(["gen/big.py"]) == ["gen/big.py"]  # a file named on the command line is checked
    jobs, _ = discover(["gen/big.py"], force_exclude=True)
    assert jobs == []


def test_a_file_named_twice_is_scanned_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"a.py": ""})
    assert _rels(["a.py", ".", "./a.py"]) == ["a.py"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_in_a_git_repository_ignored_files_are_skipped_and_untracked_ones_scanned(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    _write(tmp_path, {".gitignore": "generated/\nscratch.py\n", "tracked.py": "", "untracked.py": "",
                      "scratch.py": "", "generated/out.py": ""})
    subprocess.run(["git", "add", "tracked.py", ".gitignore"], check=True)
    assert _rels(["."]) == ["tracked.py", "untracked.py"]


@pytest.mark.parametrize("in_git", [False, True])
def test_extend_include_reads_other_names_as_python(tmp_path, monkeypatch, run_kcheck, in_git):
    monkeypatch.chdir(tmp_path)
    if in_git:
        if shutil.which("git") is None:
            pytest.skip("needs git")
        subprocess.run(["git", "init", "-q"], check=True)
    _write(tmp_path, {"pyproject.toml": '[tool.kcheck]\nroot = true\nextend-include = ["solutions/*.py.txt"]\n',
                      "a.py": "", "solutions/s1.py.txt": BENCH, "solutions/notes.txt": "", "other/s2.py.txt": BENCH})
    assert _rels(["."]) == ["a.py", "solutions/s1.py.txt"]  # other/ is outside the glob, notes.txt too
    assert _rels(["."], extend_include=("*.py.txt",)) == ["a.py", "other/s2.py.txt", "solutions/s1.py.txt"]
    _, out, _ = run_kcheck("check", "--no-cache", "--extend-include", "other/*.txt", ".")
    assert "other/s2.py.txt" in out and "solutions/s1.py.txt" in out and "KC201" in out


# -- results ------------------------------------------------------------------------------------


def test_stdin_reports_what_the_same_file_reports(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    _, from_file, _ = run_kcheck("check", "--no-cache", "bench.py")
    _, from_stdin, _ = run_kcheck("check", "-", "--stdin-filename", "bench.py", input=BENCH)
    assert from_file == from_stdin and "KC201" in from_file


def test_cache_hits_and_invalidation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "bench.py": BENCH, "clean.py": "x = 1\n"})

    def run():
        config_for.cache_clear()  # as a new kcheck process would, read the configuration again
        jobs, _ = discover(["."])
        return scan(jobs, 1)

    cold = run()
    assert cold.cached == 0 and (tmp_path / ".kcheck_cache").is_dir()
    warm = run()
    assert warm.cached == 2 and _keys(warm) == _keys(cold)

    (tmp_path / "bench.py").write_text(BENCH.replace("fn(x).item()", "fn(x)\n    fn(x).cpu()"))
    edited = run()
    assert edited.cached == 1  # only the edited file was checked again
    assert [f.message.split()[0] for f in edited.findings] == [".cpu()"]

    (tmp_path / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nignore = ["KC201"]\n')
    reconfigured = run()
    assert reconfigured.cached == 0 and not any(f.code == "KC201" for f in reconfigured.findings)

    monkeypatch.setattr(engine, "_CODE_FINGERPRINT", ["another-kcheck"])
    assert run().cached == 0  # another kcheck version, or edited rules, never read these results


def test_cache_lives_at_the_scanned_root_without_a_configuration(tmp_path, monkeypatch):
    # a tree with no configuration and no git checkout: the cache sits where the scan's paths are
    # relative to, not in the folder of whichever file came first
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"pkg/sub/bench.py": BENCH, "pkg/zsub/other.py": "x = 1\n"})
    config_for.cache_clear()
    jobs, _ = discover(["pkg"])
    scan(jobs, 1)
    root = Path(jobs[0].root)
    assert (root / ".kcheck_cache").is_dir()
    assert not (tmp_path / "pkg" / "sub" / ".kcheck_cache").exists()


def test_code_fingerprint_follows_the_package_sources(tmp_path, monkeypatch):
    from kcheck import paths

    first = engine.code_fingerprint()
    (tmp_path / "rule.py").write_text("x = 1\n")
    monkeypatch.setattr(paths, "PACKAGE_DIR", tmp_path)
    monkeypatch.setattr(engine, "_CODE_FINGERPRINT", [])
    other = engine.code_fingerprint()
    (tmp_path / "rule.py").write_text("x = 22\n")
    monkeypatch.setattr(engine, "_CODE_FINGERPRINT", [])
    assert len({first, other, engine.code_fingerprint()}) == 3


def test_no_cache_and_no_shortcuts_never_touch_the_cache(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"pyproject.toml": "[tool.kcheck]\nroot = true\n", "bench.py": BENCH})
    jobs, _ = discover(["."])
    scan(jobs, 1, cache=False)
    scan(jobs, 1, shortcuts=False)
    assert not (tmp_path / ".kcheck_cache").exists()


def test_worker_processes_find_the_same_as_one_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = {f"m{i}.py": (BENCH if i % 5 == 0 else f"x = {i}\n") for i in range(40)}
    files["bad.py"] = "def f(:\n"
    _write(tmp_path, files)
    jobs, _ = discover(["."])
    one = scan(jobs, 1, cache=False)
    two = scan(jobs, 2, cache=False)
    assert len(one.findings) == 9 and _keys(one) == _keys(two)  # 8 KC201 and one KC900


def test_annotated_jobs_rebuilt_to_free_the_index_keep_every_answer():
    from kcheck.project import annotate

    jobs, _ = discover([str(REPO / "examples")])
    annotated = annotate(jobs)
    rebuilt = engine._compact(list(annotated))
    assert rebuilt == annotated and all(a is not b for a, b in zip(rebuilt, annotated))
    assert any(job.config.per_step or job.config.contexts for job in rebuilt)  # the index answered something


@pytest.mark.parametrize("folder", ["examples", "kernels", "checker"])
def test_shortcuts_change_no_finding_on_a_whole_tree(folder):
    jobs, _ = discover([str(REPO / folder)])
    fast = scan(jobs, 1, cache=False)
    slow = scan(jobs, 1, shortcuts=False)
    assert not fast.internal_error and not slow.internal_error
    assert _keys(fast) == _keys(slow)
    assert slow.parsed == len(jobs)
    if folder == "examples":
        assert fast.findings  # the example tree exists to have findings
    else:
        assert fast.parsed < slow.parsed  # the shortcuts did skip work


def test_worker_processes_answer_from_the_content_cache_when_only_time_stamps_changed(tmp_path, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {f"m{i}.py": (BENCH if i % 5 == 0 else f"x = {i}\n") for i in range(40)})
    for path in tmp_path.glob("m*.py"):
        os.utime(path, ns=(10**18, 10**18))  # older than the index's two-second window
    jobs, _ = discover(["."])
    cold = scan(jobs, 2)
    assert cold.cached == 0 and len(cold.findings) == 8
    stored = sorted(p.name.split("-")[0] for p in (tmp_path / ".kcheck_cache").rglob("*") if p.is_file())
    # one file per store (the project facts: an index and the facts it points into), not one per checked file
    assert stored == [".gitignore", "content", "facts", "facts", "index"]
    for path in tmp_path.glob("m*.py"):
        os.utime(path, ns=(1, 1))  # a checkout rewrites every file: same bytes, new time stamps
    touched = scan(jobs, 2)
    assert touched.cached == 40 and _keys(touched) == _keys(cold)
    (tmp_path / "m0.py").write_text(BENCH.replace("fn(x).item()", "fn(x).cpu()"))
    edited = scan(jobs, 2)
    assert edited.cached == 39 and [f.message.split()[0] for f in edited.findings if f.path == "m0.py"] == [".cpu()"]


def test_warm_scan_reads_no_file_whose_stat_is_unchanged(tmp_path, monkeypatch):
    import os
    import time as _time

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    old = _time.time_ns() - 10_000_000_000
    os.utime(tmp_path / "bench.py", ns=(old, old))  # older than the index's two-second window

    def run():
        jobs, _ = discover(["."])
        return scan(jobs, 1)

    cold = run()
    reads = []
    real = engine._read
    monkeypatch.setattr(engine, "_read", lambda job: reads.append(job.rel) or real(job))
    warm = run()
    assert reads == [] and warm.cached == 1
    assert [(f.code, f.line) for f in warm.findings] == [(f.code, f.line) for f in cold.findings]
    (tmp_path / "bench.py").write_text(BENCH.replace("fn(x).item()", "fn(x).cpu()"))
    edited = run()
    assert reads == ["bench.py"] and [f.message.split()[0] for f in edited.findings] == [".cpu()"]


def _prefilter_texts() -> list[str]:
    """Every fixture and rule example, plus edge cases for the matcher's word splitting."""
    from kcheck.registry import all_rules

    texts = [p.read_text(encoding="utf-8", errors="replace") for p in (REPO / "tests" / "fixtures").rglob("*.py")]
    texts += [ex for r in all_rules() for ex in (*r.VALID, *r.INVALID)]
    texts += ["", "x.item()", "x.item ()", "SpeedUp", "speed-up", "SPEED_UP", "_C", "torch._C.foo", "my_C1",
              "kernel[grid](x)", "kernel[grid] (x)", "half", "behalf", "'cpu'", '"cpu"', "cpu", "if", "elif x:",
              "aab", "ac", "abc", "xxyz", "a|b", "a.b", "axb", "if_x = 1", "x_if\nif", "assert", "reassert",
              "(assert)", "raise\u00e9", "\u00e9raise", "except:", "_C_", "x._C.y", "diff if", "shift"]
    return texts


@pytest.mark.parametrize("pattern", sorted(
    {p for r in __import__("kcheck.registry", fromlist=["all_rules"]).all_rules() for p in r.PREFILTER}
    | {r"\b_C\b", r"\bif\b|\bhalf\b", r"x|\bab\b|a+b", r"ab?c", r"a+b", r"x{2}yz", r"a\|b", r"(a|b)c", r"a\.b", r"[|]", r"(?i)speed[- _]?up|faster"}))
def test_prefilter_matcher_answers_exactly_what_the_regex_answers(pattern):
    import re

    from kcheck.rule import text_matcher

    matches, regex = text_matcher(pattern), re.compile(pattern)
    for text in _prefilter_texts():
        assert matches(text) == bool(regex.search(text)), (pattern, text[:80])


def test_a_file_no_rule_wants_is_only_compiled_and_still_reports_a_syntax_error(monkeypatch):
    import ast

    calls = []
    real = ast.parse
    monkeypatch.setattr(ast, "parse", lambda *a, **k: calls.append(1) or real(*a, **k))
    config = config_for(REPO / "x.py")
    assert engine.check_source("x = 1\n", "x.py", config).findings == []
    assert calls == []  # compiled, never parsed into a tree
    broken = engine.check_source("x = (\n", "x.py", config).findings
    assert [f.code for f in broken] == ["KC900"]
    # compile() rejects what ast.parse accepts (return outside a function): that is not a parse error
    assert engine.check_source("return 1\n", "x.py", config).findings == []


def test_checking_a_file_pauses_the_collector_and_leaves_no_cyclic_garbage(tmp_path):
    import gc

    path = tmp_path / "bench.py"
    path.write_text(BENCH)
    config = config_for(path)
    job = engine.Job(str(path), "bench.py", config)
    seen = []
    real = engine.check_source
    try:
        engine.check_source = lambda *a, **k: seen.append(gc.isenabled()) or real(*a, **k)
        gc.collect()
        result = engine.check_job(job, True, None)
        young = gc.get_count()[0]
        assert gc.isenabled() and seen == [False]  # off while the file was checked, on again after
        assert young < 100  # and the young generation was collected as the file was done
        assert [f.code for f in result.findings] == ["KC201"]
        # what the file's reference cycles held was freed by the pass after it (other tests' leftovers
        # may still be found: only the checker's own objects count)
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            ours = [o for o in gc.garbage if type(o).__module__.split(".")[0] in ("kcheck", "libcst", "ast")]
            assert ours == []
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        gc.disable()  # a caller that manages the collector itself is left alone
        try:
            engine.check_job(job, True, None)
            assert not gc.isenabled() and seen == [False, False]
        finally:
            gc.enable()
    finally:
        engine.check_source = real


def test_checking_leaves_no_reference_cycles_of_its_own():
    """With no cycles, refcounting frees each file's trees as soon as it is done and the collector's
    pass after each file walks almost nothing. Every example and every rule fixture (Triton kernels,
    helpers that call helpers, dispatch claims, recursive rule logic) is checked with the collector
    off; a collection afterwards must find none of kcheck's, libcst's or ast's objects."""
    import gc

    paths = sorted((REPO / "examples").glob("*.py")) + sorted((REPO / "tests" / "fixtures").rglob("*.py"))
    assert len(paths) > 100
    gc.collect()
    gc.disable()
    try:
        for path in paths:
            config = config_for(path)
            engine.check_source(path.read_text(), path.name, config)
            engine.check_source(path.read_text(), path.name, config, shortcuts=False)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        ours = sorted({f"{type(o).__module__}.{type(o).__name__}" for o in gc.garbage
                       if type(o).__module__.split(".")[0] in ("kcheck", "libcst", "ast")})
        assert ours == []
        # and the last file's libcst tree is not kept for the next one by the model's node index
        import kcheck.model

        assert kcheck.model._INDEX is None
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]", "null", "entries"])
def test_a_damaged_cache_is_ignored_and_rewritten(tmp_path, monkeypatch, damage):
    import json
    import os

    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"bench.py": BENCH, "clean.py": "x = 1\n"})
    for path in tmp_path.glob("*.py"):
        os.utime(path, ns=(10**18, 10**18))
    jobs, _ = discover(["."])
    cold = scan(jobs, 1)
    stores = list((tmp_path / ".kcheck_cache").rglob("*.json"))
    assert sorted(p.name.split("-")[0] for p in stores) == ["content", "index"]
    for path in stores:  # the whole file damaged, or ("entries") every entry in a sound table
        path.write_text(json.dumps({k: "damaged" for k in json.loads(path.read_text())}) if damage == "entries"
                        else damage)
    again = scan(jobs, 1)
    assert again.cached == 0 and _keys(again) == _keys(cold) and not again.errors
    assert scan(jobs, 1).cached == 2  # and written afresh
