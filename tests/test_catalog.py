"""The knowledge catalog: the shipped catalog validates, each invalid example fails with its message."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcheck import catalog as cat
from kcheck.paths import data_dir

EXAMPLES = Path(__file__).parent / "catalog_examples"
VALID = EXAMPLES / "valid"
INVALID_CASES = sorted(p.name for p in (EXAMPLES / "invalid").iterdir() if p.is_dir())
TOPICS = ["hardware", "measuring", "profiling", "attention", "gemm", "moe", "norm-rope", "sampling",
          "communication", "triton-cuda", "verification", "models"]
# Ids that rules, kernels and the docs cite by name (fixed by the project's conventions).
REQUIRED_IDS = """
profiling/amdahl-ceiling profiling/microbenchmark-rejects-never-accepts profiling/choose-target-by-time-share
profiling/integrate-whole-boundary profiling/close-every-trial
verification/library-dispatch-is-not-a-kernel verification/ways-kernels-cheat-benchmarks
verification/tolerances-by-dtype verification/upcast-reference verification/fresh-random-inputs
verification/poisoned-outputs verification/nan-never-passes verification/graph-replay
measuring/keep-timed-path-clean measuring/host-syncs measuring/warmup-and-compilation measuring/l2-flushing
measuring/median-of-device-events measuring/host-timers-need-sync measuring/achievable-bandwidth
triton-cuda/declared-fallbacks triton-cuda/cuda-graph-capture triton-cuda/masks-on-tail-blocks
triton-cuda/int64-offsets triton-cuda/fp32-accumulation triton-cuda/constexpr-block-sizes triton-cuda/autotune-keys
sampling/avoid-host-syncs norm-rope/rmsnorm-roofline norm-rope/fused-add-rmsnorm norm-rope/rotary-embedding-layouts
moe/silu-and-mul-activation gemm/fp8-per-token-quantization hardware/h100-sxm hardware/h200-sxm
""".split()
GPU_KEYS = ["sm-count", "hbm-capacity", "hbm-bandwidth", "l2-size", "smem-per-sm", "bf16-dense-tflops",
            "fp8-dense-tflops", "tdp", "nvlink-bandwidth"]


def materialize(case: str, tmp_path: Path) -> Path:
    """The valid example with one invalid case's files laid over it; returns the catalog folder."""
    shutil.copytree(VALID, tmp_path, dirs_exist_ok=True)
    overlay = EXAMPLES / "invalid" / case
    for path in overlay.rglob("*"):
        if path.is_file() and path.name != "EXPECTED":
            target = tmp_path / path.relative_to(overlay)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return tmp_path / "knowledge"


# ------------------------------------------------------------------ the shipped catalog


def test_shipped_catalog_validates_clean_including_rule_references():
    problems = cat.validate()
    assert problems == [], "\n".join(map(str, problems))


def test_shipped_catalog_covers_every_topic_with_enough_entries():
    catalog = cat.load_catalog()
    counts = cat.stats(catalog)["entries_per_topic"]
    assert list(catalog.topics) == TOPICS
    assert sum(counts.values()) >= 60
    assert {t: n for t, n in counts.items() if n < 3} == {}


def test_ids_cited_by_rules_and_kernels_exist():
    catalog = cat.load_catalog()
    assert [i for i in REQUIRED_IDS if i not in catalog.entries] == []


@pytest.mark.parametrize("gpu", ["hardware/h100-sxm", "hardware/h200-sxm"])
def test_gpu_entries_carry_table_keys_with_numbers(gpu):
    facts = {f.get("key"): f for f in cat.load_catalog().get(gpu)["facts"]}
    for key in GPU_KEYS:
        assert isinstance(facts[key]["value"], (int, float)), key
        assert facts[key]["unit"], key


def test_b200_fills_every_table_key_or_says_why_not():
    """No silent blank in the B200 column: each key is a number with a unit, or a stated absence."""
    facts = {f.get("key"): f for f in cat.load_catalog().get("hardware/b200")["facts"]}
    for key in GPU_KEYS:
        value = facts[key]["value"]
        assert isinstance(value, (int, float)) and facts[key]["unit"] or value == "not published", key


def test_every_source_records_where_and_when():
    for source in cat.load_catalog().sources.values():
        assert source["retrieved"]
        assert source.get("url") or (source.get("repo") and source.get("commit")) or source["kind"] == "measurement"


# ------------------------------------------------------------------ examples


def test_valid_example_is_valid_and_exercises_every_kind_of_evidence():
    assert cat.validate(VALID / "knowledge") == []
    evidence = cat.stats(cat.load_catalog(VALID / "knowledge"))["facts_per_evidence"]
    assert set(evidence) == {"cited", "derived", "measured"}


@pytest.mark.parametrize("case", INVALID_CASES)
def test_invalid_example_breaks_one_thing_and_validate_names_it(case, tmp_path):
    overlay = [p for p in (EXAMPLES / "invalid" / case).rglob("*") if p.is_file() and p.name != "EXPECTED"]
    assert len(overlay) == 1, "an invalid example replaces exactly one file of the valid one"
    expected = (EXAMPLES / "invalid" / case / "EXPECTED").read_text().strip()
    problems = cat.validate(materialize(case, tmp_path))
    assert [str(p) for p in problems] == [expected]


def test_cli_validate_exits_2_and_prints_every_problem(tmp_path):
    root = materialize("unknown-field", tmp_path)
    # Break a second, independent thing: all problems come out in one run.
    index = root / "index.yaml"
    index.write_text(index.read_text().replace("title: Example catalog", "title: Example catalog\nversion: 2"))
    result = CliRunner().invoke(cat.catalog, ["validate", str(root)])
    assert result.exit_code == 2
    lines = result.stdout.strip().splitlines()
    assert lines == ["knowledge/gemm/example.yaml:5: owner: unknown field",
                     "knowledge/index.yaml:2: version: unknown field"]


def test_cli_validate_ok_summary_on_valid_example():
    result = CliRunner().invoke(cat.catalog, ["validate", str(VALID / "knowledge")])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("OK: 2 entries in 2 topics, 7 facts, 3 sources")


def test_rule_knowledge_ids_must_exist():
    class FakeRule:
        CODE = "KC999"
        KNOWLEDGE = ("gemm/example", "gemm/no-such-entry")

    problems = cat.validate(VALID / "knowledge", rules=[FakeRule])
    assert len(problems) == 1
    assert problems[0].field == "KC999.KNOWLEDGE"
    assert problems[0].message == "unknown catalog entry 'gemm/no-such-entry'"
    assert problems[0].file.endswith("test_catalog.py")


def test_missing_results_file_is_reported(tmp_path):
    shutil.copytree(VALID, tmp_path, dirs_exist_ok=True)
    (tmp_path / "kernels" / "results" / "example.json").unlink()
    problems = cat.validate(tmp_path / "knowledge")
    assert [(p.field, p.message) for p in problems] == [
        ("facts[4].results", "results file 'kernels/results/example.json' not found"),
        ("facts[5].results", "results file 'kernels/results/example.json' not found")]


def test_markdown_body_without_entry_is_reported(tmp_path):
    shutil.copytree(VALID, tmp_path, dirs_exist_ok=True)
    (tmp_path / "knowledge" / "gemm" / "orphan.md").write_text("text")
    assert [str(p) for p in cat.validate(tmp_path / "knowledge")] == [
        "knowledge/gemm/orphan.md:1: Markdown body without an entry orphan.yaml beside it"]


# ------------------------------------------------------------------ schemas


def _walk(schema, where="$"):
    if isinstance(schema, dict):
        yield where, schema
        for key, value in schema.items():
            yield from _walk(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from _walk(value, f"{where}[{i}]")


@pytest.mark.parametrize("name", ["entry", "sources", "index"])
def test_schema_is_draft_2020_12_closed_and_documented(name):
    import jsonschema

    schema = json.loads((data_dir("schemas") / f"{name}.schema.json").read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    for where, node in _walk(schema):
        if isinstance(node.get("properties"), dict):
            if node.get("type") == "object":
                assert node.get("additionalProperties") is False, where
            for prop, sub in node["properties"].items():
                assert sub.get("description"), f"{where}.properties.{prop} has no description"


# ------------------------------------------------------------------ loading, search, show, stats


def test_load_catalog_is_cached_per_root():
    assert cat.load_catalog() is cat.load_catalog(data_dir("knowledge"))
    assert cat.load_catalog(VALID / "knowledge") is not cat.load_catalog()


def test_markdown_bodies_are_loaded_beside_entries():
    assert cat.load_catalog(VALID / "knowledge").bodies["gemm/example"].startswith("A longer Markdown body")


def test_search_ranks_id_and_title_matches_first():
    catalog = cat.load_catalog()
    found = [e["id"] for e in catalog.search("amdahl")]
    assert found[0] == "profiling/amdahl-ceiling"
    assert catalog.search(["fused", "rmsnorm"])[0]["id"] == "norm-rope/fused-add-rmsnorm"
    assert catalog.search("zzzz-no-such-word") == []
    # Every word must match somewhere.
    assert all("tolerance" in cat._flatten_text(e).lower() for e in catalog.search("tolerance bfloat16"))


def test_get_unknown_id_suggests_close_ids():
    with pytest.raises(KeyError, match="did you mean profiling/amdahl-ceiling"):
        cat.load_catalog().get("amdahl-ceiling")


def test_entry_url():
    assert cat.entry_url("gemm/library-first", "https://x.io/kcheck/") == "https://x.io/kcheck/catalog/gemm/library-first/"


def test_cli_show_prints_facts_with_sources_and_page():
    result = CliRunner().invoke(cat.catalog, ["show", "hardware/h200-sxm"])
    assert result.exit_code == 0, result.output
    assert "H200 SXM at a glance" in result.stdout
    assert "[4.8 TB/s]" in result.stdout
    assert "https://www.nvidia.com/en-us/data-center/h200/" in result.stdout
    assert "derived from hardware/h200-sxm#hbm-bandwidth" in result.stdout
    assert result.stdout.rstrip().endswith("/catalog/hardware/h200-sxm/")


def test_cli_show_unknown_id_fails_cleanly():
    result = CliRunner().invoke(cat.catalog, ["show", "gemm/nope"])
    assert result.exit_code == 1
    assert "no catalog entry 'gemm/nope'" in result.output


def test_cli_search_lists_ids_and_titles():
    result = CliRunner().invoke(cat.catalog, ["search", "split", "kv"])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].startswith("attention/split-kv-decode")


def test_stats_counts_match_the_catalog():
    catalog = cat.load_catalog(VALID / "knowledge")
    assert cat.stats(catalog) == {
        "entries": 2,
        "entries_per_topic": {"gemm": 1, "profiling": 1},
        "entries_per_kind": {"procedure": 1, "rule-of-thumb": 1},
        "entries_per_arch": {"sm90": 1, "sm100": 1, "any": 1},
        "facts": 7,
        "facts_per_evidence": {"cited": 3, "derived": 2, "measured": 2},
        "arch_specific_facts": {"sm100": 1},
        "sources": 3,
        "sources_per_kind": {"measurement": 1, "official-doc": 1, "upstream-code": 1},
    }
    result = CliRunner().invoke(cat.catalog, ["stats", "--format", "json", str(VALID / "knowledge")])
    assert json.loads(result.stdout) == cat.stats(catalog)


def test_cli_stats_text_lists_entries_per_architecture():
    result = CliRunner().invoke(cat.catalog, ["stats", str(VALID / "knowledge")])
    assert result.exit_code == 0, result.output
    section = result.stdout.split("Entries per architecture\n")[1].split("\n\n")[0].split("\n")
    assert [line.split() for line in section] == [["sm90", "1"], ["sm100", "1"], ["any", "1"]]
    assert "Architecture-specific facts\n  sm100" in result.stdout


def test_shipped_catalog_counts_sm100_entries_and_each_has_an_sm100_fact():
    catalog = cat.load_catalog()
    per_arch = cat.stats(catalog)["entries_per_arch"]
    assert per_arch["sm100"] >= 12 and per_arch["sm90"] >= per_arch["sm80"]
    for entry in catalog.entries.values():
        if "sm100" in entry["applies_to"].get("archs", []):
            assert any("sm100" in f.get("archs", []) for f in entry["facts"]), entry["id"]


def test_importing_the_catalog_module_is_cheap():
    code = ("import sys, kcheck.catalog; "
            "print(sorted(m for m in ('yaml', 'jsonschema', 'torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ guides

REFERENCES = Path(__file__).resolve().parents[1] / "references"
GUIDES = sorted(REFERENCES.glob("0*.md")) + [REFERENCES / "templates" / "review-checklist.md"]
SECTIONS = ["When to use this guide", "Steps", "Done when", "Common mistakes", "Read next"]


def test_all_guides_exist():
    stems = [g.stem for g in GUIDES]
    assert stems == ["01-is-it-a-kernel", "02-signature", "03-writing", "04-fusion", "05-verification",
                     "06-measuring", "07-substitution", "08-strategies", "review-checklist"]


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.stem)
def test_guide_has_the_common_sections_and_links_resolve(guide):
    import re

    from kcheck.registry import all_rules

    text = guide.read_text()
    assert re.findall(r"^## (.+)$", text, re.M) == SECTIONS
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    entries = cat.load_catalog().entries
    rules = {rule.NAME for rule in all_rules()}
    stems = {g.stem for g in GUIDES}
    assert any(link.startswith("../../catalog/") for link in links)
    for link in links:
        if link.startswith("../../catalog/"):
            assert link.removeprefix("../../catalog/").rstrip("/") in entries, link
        elif link.startswith("../../rules/"):
            assert link.removeprefix("../../rules/").rstrip("/") in rules, link
        else:
            assert link.startswith("../") and link.strip("./") in stems, link


# ------------------------------------------------------------------ the installed wheel


@pytest.mark.slow
def test_wheel_outside_the_repository_validates_and_cites_the_catalog(tmp_path):
    """Build the wheel, install it (dependencies from this interpreter) and run it from elsewhere."""
    repo = Path(__file__).resolve().parents[1]
    run = lambda *cmd, **kw: subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600, **kw)  # noqa: E731
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(tmp_path / "wheels"), str(repo))
    wheel = next((tmp_path / "wheels").glob("kcheck-*.whl"))
    run(sys.executable, "-m", "venv", "--system-site-packages", str(tmp_path / "venv"))
    bin_dir = tmp_path / "venv" / "bin"
    run(str(bin_dir / "pip"), "install", "-q", "--no-deps", str(wheel))
    where = run(str(bin_dir / "python"), "-c", "import kcheck.catalog as c; print(c.default_root())",
                cwd=tmp_path).stdout.strip()
    assert where.startswith(str(tmp_path / "venv")), where
    assert run(str(bin_dir / "kcheck"), "catalog", "validate", cwd=tmp_path).stdout.startswith("OK: ")
    shown = run(str(bin_dir / "kcheck"), "catalog", "show", "profiling/amdahl-ceiling", cwd=tmp_path).stdout
    assert "CUDA C++ Best Practices Guide" in shown


def test_numbers_in_prose_are_claims_but_names_and_ranges_are_not():
    text = "132 SMs, 3.35 TB/s, 151,936 tokens, eps 1e-6, 37x faster; H100, fp8, Llama-3, 80-90%, 32-bit, 2 passes"
    assert cat._numbers(text) == {132.0, 3.35, 151936.0, 37.0}
