"""The docs site: it builds with ``mkdocs build --strict``, every internal link and anchor resolves,
every URL kcheck prints lands on a built page, and the generated pages say what the data says.

The site is built once per session into a temporary folder (a few seconds).
"""

from __future__ import annotations

import html as htmllib
import importlib.util
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml

from kcheck.catalog import entry_url, load_catalog
from kcheck.config import Config
from kcheck.explain import rule_record
from kcheck.finding import DEFAULT_DOCS_URL, rule_url
from kcheck.registry import all_rules

REPO = Path(__file__).resolve().parent.parent
SITE_URL = "https://kcheck.github.io/kcheck/"
pytestmark = pytest.mark.slow


class _Page(HTMLParser):
    """The ids and the outgoing links (href/src) of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.edit: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key):
                self.links.append(attrs[key])
        if tag == "a" and attrs.get("title") == "Edit this page":
            self.edit = attrs.get("href")


def _yaml_config() -> dict:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    return yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)


_BUILT: dict[str, Path] = {}


def build_site(tmp_path_factory) -> Path:
    """The site, built once per session with ``mkdocs build --strict`` into a temporary folder
    (shared with the browser test)."""
    if "site" not in _BUILT:
        _BUILT["site"] = _build(tmp_path_factory)
    return _BUILT["site"]


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    return build_site(tmp_path_factory)


def _build(tmp_path_factory) -> Path:
    missing = [m for m in ("mkdocs", "material", "mkdocs_gen_files", "mkdocs_literate_nav", "matplotlib")
               if importlib.util.find_spec(m) is None]
    assert not missing, f"the docs site needs {missing}: pip install -e '.[docs]'"
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", DISABLE_MKDOCS_2_WARNING="true")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{log[-6000:]}"
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, "\n".join(warnings)
    return out


@pytest.fixture(scope="session")
def pages(site) -> dict[str, _Page]:
    """Every built HTML page, parsed, by its path relative to the site root."""
    parsed = {}
    for path in site.rglob("*.html"):
        page = _Page()
        page.feed(path.read_text(encoding="utf-8"))
        parsed[path.relative_to(site).as_posix()] = page
    return parsed


def _page_for(site: Path, url_path: str) -> Path | None:
    """The built file a site-relative URL path resolves to (directory URLs serve index.html)."""
    target = site / unquote(url_path).lstrip("/")
    if url_path.endswith("/") or target.is_dir():
        target = target / "index.html"
    return target if target.is_file() else None


def _text(html: str) -> str:
    """A page's text, tags stripped and entities decoded."""
    return htmllib.unescape(re.sub(r"<[^>]+>", "", html))


def _built_page_for_url(site: Path, url: str, base: str = SITE_URL) -> Path | None:
    assert url.startswith(base), f"{url} is not under the site URL {base}"
    return _page_for(site, url[len(base):])


# --------------------------------------------------------------------------- the build


def test_config_site_url_matches_kcheck_default():
    """The URLs kcheck prints by default are this site's URLs."""
    config = _yaml_config()
    assert config["site_url"] == SITE_URL == DEFAULT_DOCS_URL == Config(root=REPO).docs_url
    assert config["use_directory_urls"] is True
    assert "content.code.copy" in config["theme"]["features"]
    assert "content.action.edit" in config["theme"]["features"]
    assert "navigation.tabs" in config["theme"]["features"]
    schemes = {p.get("scheme") for p in config["theme"]["palette"]}
    assert {"default", "slate"} <= schemes, "light and dark palettes with a toggle"


def test_internal_links_and_anchors_resolve(site, pages):
    broken = []
    checked = 0
    prefix = urlsplit(SITE_URL).path  # /kcheck/: absolute links (the 404 page has them) carry it
    for rel, page in pages.items():
        page_url = "http://site" + prefix + rel
        for link in page.links:
            parts = urlsplit(urljoin(page_url, link))
            if parts.scheme in ("mailto", "data", "javascript") or (parts.netloc and parts.netloc != "site"):
                continue
            inside = parts.path.startswith(prefix)
            target = _page_for(site, parts.path[len(prefix):]) if inside else None
            if target is None:
                broken.append(f"{rel}: {link} -> no such file")
                continue
            checked += 1
            if parts.fragment and target.suffix == ".html":
                target_rel = target.relative_to(site).as_posix()
                if unquote(parts.fragment) not in pages[target_rel].ids:
                    broken.append(f"{rel}: {link} -> no anchor #{parts.fragment} in {target_rel}")
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(broken[:50])
    assert checked > 1000, f"only {checked} links checked: is the site complete?"


def test_generated_pages_are_not_committed():
    tracked = subprocess.run(["git", "ls-files", "docs"], cwd=REPO, capture_output=True, text=True).stdout.split()
    generated = [p for p in tracked if p.startswith(("docs/catalog/", "docs/rules/", "docs/guides/", "docs/kernels/"))]
    assert not generated, f"generated pages are committed: {generated}"


# --------------------------------------------------------------------------- URLs kcheck prints


def test_every_rule_url_resolves(site):
    rules = all_rules()
    assert rules
    for rule in rules:
        url = rule_url(rule.NAME, SITE_URL)
        built = _built_page_for_url(site, url)
        assert built, f"{rule.CODE}: {url} has no page"
        html = built.read_text(encoding="utf-8")
        assert f"{rule.CODE} {rule.NAME}" in html
    assert _page_for(site, "rules/"), "the rules index"


def test_every_url_kcheck_rule_prints_resolves(site, run_kcheck):
    urls = set()
    for rule in all_rules():
        code, out, _ = run_kcheck("rule", rule.CODE)
        assert code == 0
        found = set(re.findall(r"https?://\S+", out))
        assert rule_url(rule.NAME, SITE_URL) in found
        urls |= found
    missing = [u for u in sorted(urls) if u.startswith(SITE_URL) and not _built_page_for_url(site, u)]
    assert not missing, missing
    assert any("/catalog/" in u for u in urls)


def test_every_entry_rules_cite_resolves(site, run_kcheck):
    cited = {eid for rule in all_rules() for eid in rule.KNOWLEDGE}
    assert cited
    for entry_id in sorted(cited):
        url = entry_url(entry_id, SITE_URL)
        assert _built_page_for_url(site, url), f"{entry_id}: {url} has no page"
        code, out, _ = run_kcheck("catalog", "show", entry_id)
        assert code == 0
        printed = re.findall(r"Page: (\S+)", out)
        assert printed == [url]


def test_finding_urls_resolve(site, run_kcheck):
    """The URLs in real findings (json output over the example tree) land on built pages."""
    code, out, _ = run_kcheck("check", str(REPO / "examples"), "--output-format", "json", "--no-cache", "--exit-zero")
    assert code == 0
    data = json.loads(out)
    assert data, "the example tree has findings"
    for finding in data:
        assert _built_page_for_url(site, finding["url"]), finding["url"]
        for entry in finding["knowledge"]:
            assert _built_page_for_url(site, entry["url"]), entry["url"]


def test_configured_docs_url_maps_onto_the_same_pages(site):
    """With another base URL, the printed URLs differ only in the base."""
    base = "https://docs.example.com/kc/"
    for rule in all_rules():
        url = rule_url(rule.NAME, base)
        assert _built_page_for_url(site, url, base) == _built_page_for_url(site, rule_url(rule.NAME, SITE_URL))


# --------------------------------------------------------------------------- what the pages say


def test_catalog_pages_and_topic_indexes(site):
    catalog = load_catalog()
    assert _page_for(site, "catalog/")
    for topic in catalog.topics:
        index = _page_for(site, f"catalog/{topic}/")
        assert index, topic
    for entry_id, entry in catalog.entries.items():
        page = _built_page_for_url(site, entry_url(entry_id, SITE_URL))
        assert page, entry_id
        html = page.read_text(encoding="utf-8")
        text = _text(html)
        assert entry_id in text
        assert f"{entry['title']}" in text, entry_id
        assert " ".join(entry["summary"].split())[:60] in " ".join(text.split()), entry_id
        # The edit link opens the entry's YAML.
        assert f"/edit/main/knowledge/{entry_id}.yaml" in html, entry_id
        # A fact marked specific to some architectures says so on the page.
        for fact in entry["facts"]:
            if fact.get("archs"):
                assert f"Specific to: {', '.join(fact['archs'])}" in text, entry_id


def test_rule_pages_and_entry_pages_link_both_ways(site, pages):
    catalog = load_catalog()
    for rule in all_rules():
        record = rule_record(rule)
        rule_rel = f"rules/{rule.NAME}/index.html"
        rule_page = pages[rule_rel]
        html = (site / rule_rel).read_text(encoding="utf-8")
        text = _text(html)
        for section in record["docs"]:
            if section not in ("summary", "Options"):
                assert f">{section}<" in html, (rule.CODE, section)
        for example in record["invalid"] + record["valid"]:
            for line in example.splitlines():
                assert line.strip() in text, (rule.CODE, line)
        module = "checker/" + rule.__module__.removeprefix("kcheck.").replace(".", "/") + ".py"
        assert rule_page.edit and rule_page.edit.endswith(f"/edit/main/{module}"), (rule.CODE, rule_page.edit)
        assert (REPO / module).is_file()
        for entry_id in rule.KNOWLEDGE:
            assert f"../../catalog/{entry_id}/" in rule_page.links, (rule.CODE, entry_id)
            entry_page = pages[f"catalog/{entry_id}/index.html"]
            assert f"../../../rules/{rule.NAME}/" in entry_page.links, (entry_id, rule.CODE)
            assert entry_id in catalog.entries


def test_hardware_comparison_table(site):
    """A column per GPU entry with keyed facts, the values as the entries state them."""
    catalog = load_catalog()
    html = _page_for(site, "catalog/hardware/").read_text(encoding="utf-8")
    assert "Hardware comparison" in html
    gpus = [eid for eid, e in catalog.entries.items()
            if e["topic"] == "hardware" and any(f.get("key") == "hbm-bandwidth" for f in e["facts"])]
    assert {"hardware/h100-sxm", "hardware/h200-sxm"} <= set(gpus)
    table = html[html.index('id="hardware-comparison"'):]
    table = table[: table.index("</table>")]
    for eid in gpus:
        assert f'href="{eid.split("/")[1]}/"' in table, eid
        bandwidth = next(f for f in catalog.entries[eid]["facts"] if f.get("key") == "hbm-bandwidth")
        shown = f"{bandwidth['value']} {bandwidth['unit']}" if "unit" in bandwidth else str(bandwidth["value"])
        assert shown in table.replace(",", ""), eid  # a figure with its unit, or a worded cell


def test_configuration_page_lists_every_key(site):
    schema = json.loads((REPO / "schemas" / "config.schema.json").read_text(encoding="utf-8"))
    html = _page_for(site, "configuration/").read_text(encoding="utf-8")
    assert "kcheck:config-keys" not in html
    for key in schema["properties"]:
        assert f'id="{key}"' in html, key


def test_guides_are_pages(site):
    stems = [p.stem for p in (REPO / "references").glob("*.md")]
    assert stems, "references/ has guides"
    for stem in stems + ["review-checklist"]:
        page = _page_for(site, f"guides/{stem}/")
        assert page, stem
        assert "/edit/main/references/" in page.read_text(encoding="utf-8")


def test_search_index_has_rule_codes_names_and_entry_ids(site):
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    titles = {doc["location"]: doc["title"] for doc in index["docs"]}
    texts = {doc["location"]: doc["text"] for doc in index["docs"]}
    for rule in all_rules():
        assert titles[f"rules/{rule.NAME}/"] == f"{rule.CODE} {rule.NAME}"
    for entry_id in load_catalog().entries:
        assert entry_id in texts[f"catalog/{entry_id}/"]


# --------------------------------------------------------------------------- the kernels page


@pytest.fixture(scope="module")
def generator():
    return runpy.run_path(str(REPO / "docs" / "gen_pages.py"), run_name="gen_pages")


def _results(tmp_path: Path) -> Path:
    rows = []
    for impl, scale in (("kcheck", 0.9), ("torch", 0.5), ("torch.compile", 0.7)):
        for tokens in (1, 64, 4096):
            gbps = round(4200 * scale * tokens / (tokens + 32), 1)
            rows.append({"op": "rms_norm", "dtype": "bfloat16", "tokens": tokens, "shape": {"tokens": tokens, "hidden": 4096},
                         "impl": impl, "median_us": round(16e6 / (gbps * 1e3), 3), "gbps": gbps,
                         "frac_copy": round(gbps / 4200, 4), "frac_datasheet": round(gbps / 4800, 4)})
    data = {"kcheck_commit": "0" * 40, "date": "2026-12-01T00:00:00+00:00", "gpu": "NVIDIA H200", "driver": "570.1",
            "torch": "2.13.0", "triton": "3.6.0", "cuda": "13.0",
            "ceilings": {"copy_gbps": 4200.0, "datasheet_gbps": 4800},
            "rows": rows,
            "verify": [{"op": "rms_norm", "dtype": "bfloat16", "case": "tail", "reason": "masked tail", "passed": True,
                        "rel_err": 1e-3, "max_abs_err": 2e-3, "graph_replay": True},
                       {"op": "rms_norm", "dtype": "float16", "case": "big", "reason": "int64 offsets", "passed": False,
                        "rel_err": 0.5, "max_abs_err": 3.0, "graph_replay": False}]}
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "h200.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


def test_kernels_page_draws_results_and_plots(generator, tmp_path):
    folder = _results(tmp_path)
    pages = {p.path: p.content for p in generator["generate"](results=folder)}
    text = pages["kernels/index.md"]
    assert "NVIDIA H200" in text and "4,200 GB/s" in text
    assert "| bfloat16 | 4096 | **" in text and "best peer ÷ kcheck" in text
    assert "1 of 2 checks passed" in text and "`big`" in text
    plot = pages["kernels/plots/h200-rms_norm.svg"]
    assert plot.startswith(b"<?xml") and b"<svg" in plot
    assert b"measured copy" in plot and b"torch.compile" in plot
    again = {p.path: p.content for p in generator["generate"](results=folder)}
    assert again["kernels/plots/h200-rms_norm.svg"] == plot, "plots render deterministically"


def test_kernels_page_never_rounds_a_miss_up_to_the_goal(generator, tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    row = {"op": "silu_and_mul", "dtype": "bfloat16", "tokens": 32, "shape": {"tokens": 32}, "gbps": 4222.0}
    rows = [{**row, "impl": "kcheck", "median_us": 4.82, "frac_copy": 0.9924, "frac_datasheet": 0.8797},
            {**row, "impl": "torch.compile", "median_us": 4.80, "frac_copy": 0.99, "frac_datasheet": 0.88}]
    (folder / "h200.json").write_text(json.dumps({"gpu": "NVIDIA H200", "ceilings": {"copy_gbps": 4255.0}, "rows": rows,
                                                  "verify": []}), encoding="utf-8")
    text = {p.path: p.content for p in generator["generate"](results=folder)}["kernels/index.md"]
    line = next(x for x in text.splitlines() if x.startswith("| bfloat16 | 32 |"))
    assert "| 99.2% | 87.9% |" in line and line.endswith("| 0.99× |"), line


def test_kernels_page_draws_the_ceilings_at_each_kernels_size(generator, tmp_path):
    folder = _results(tmp_path)
    (folder / "ceilings").mkdir()
    case = "rms_norm T=16384"
    rows = [{"case": case, "bytes": 268e6, "gbps": 4100.0, "frac_datasheet": 0.8542},
            {"case": f"{case} same-traffic 1:1", "bytes": 268e6, "gbps": 4120.0, "frac_datasheet": 0.8583},
            {"case": f"{case} same-traffic 1:1 triton2048-w8", "bytes": 268e6, "gbps": 4158.0, "frac_datasheet": 0.8663},
            {"case": f"{case} same-traffic 1:1 triton8192-w4", "bytes": 268e6, "gbps": 3900.0, "frac_datasheet": 0.8125},
            {"case": f"{case} same-traffic 1:1 swap1024-w2", "bytes": 268e6, "gbps": 3956.0, "frac_datasheet": 0.8242},
            {"case": f"{case} same-traffic 1:1 pair1024-w4", "bytes": 268e6, "gbps": 4125.0, "frac_datasheet": 0.8594},
            {"case": "copy 64 MiB", "bytes": 134e6, "gbps": 3985.0, "frac_datasheet": 0.83}]
    (folder / "ceilings" / "h200_movers.json").write_text(
        json.dumps({"gpu": "NVIDIA H200", "date": "2026-12-04T00:00:00+00:00", "kcheck_commit": "0b67d27", "rows": rows}),
        encoding="utf-8")
    text = {p.path: p.content for p in generator["generate"](results=folder)}["kernels/index.md"]
    assert "| rms_norm T=16384 | 268 MB | 85.4% | 85.8% | 86.6% (triton2048-w8) | 85.9% (pair1024-w4) | 82.4% (swap1024-w2) |" in text
    assert "copy 64 MiB" not in text
    (folder / "ceilings" / "broken.json").write_text('{"rows": [{"bytes": 1}]}', encoding="utf-8")
    with pytest.raises(ValueError, match="broken.json"):
        generator["generate"](results=folder)


def test_kernels_page_rejects_a_bad_results_file(generator, tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="broken.json"):
        generator["generate"](results=folder)


def test_entries_link_the_kernels_that_implement_them(generator):
    pages = {p.path: p.content for p in generator["generate"]()}
    from kcheck.kernels import OPS

    linked = 0
    for op in OPS:
        doc = (REPO / "kernels" / f"{op}.py").read_text(encoding="utf-8")
        for entry_id in set(re.findall(r"\b[a-z0-9-]+/[a-z0-9-]+\b", doc.split('"""')[1])) & set(load_catalog().entries):
            assert f"kernels/index.md#{op})" in pages[f"catalog/{entry_id}.md"], (op, entry_id)
            linked += 1
    assert linked >= len(OPS)


# --------------------------------------------------------------------------- the deploy workflow


def test_pages_workflow_passes_actionlint():
    workflow = REPO / ".github" / "workflows" / "docs.yml"
    actionlint = shutil.which("actionlint")
    assert actionlint, "actionlint not found: pip install -e '.[test]'"
    proc = subprocess.run([actionlint, "-no-color", str(workflow)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = workflow.read_text(encoding="utf-8")
    assert "mkdocs build --strict" in text and "actions/deploy-pages@" in text
