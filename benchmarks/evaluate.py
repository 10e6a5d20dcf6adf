"""Measure kcheck against the labelled corpus: precision and recall per rule and family, per split.

    python benchmarks/corpus.py fetch DEST                   # once: the trees and fixes
    python benchmarks/evaluate.py DEST --split dev           # tune here as often as you like
    python benchmarks/evaluate.py DEST --split test --out benchmarks/results/evaluation
    python benchmarks/evaluate.py DEST --split test --sample precision-todo/

kcheck runs over every tree of the split (every rule, preview ones included) and over the fixes,
then its findings meet the labels of ``benchmarks/labels/`` (see its README):

- **recall**: of the positive labels (real instances found by reading, and the pre-fix side of
  merged fixes), the share with a finding of the family (per rule: of the rule) inside the range;
- **precision**: of the findings judged in ``precision/``, the share judged TRUE;
- **false alarms**: findings inside negative labels (clean look-alikes, the post-fix side).

Every interval is Wilson's 95 % score interval. Every label that disagrees with kcheck is
printed. A rule is **stable** when its test precision is at least 80 % and the interval is at most
30 points wide, otherwise **preview** (the bar of benchmarks/README.md).

Every run that reads the test split appends a line to ``benchmarks/results/test-looks.md``: the
number of looks at the test split stays visible. ``--sample FILE`` writes the precision sample to
judge: every finding of a rule with at most 10 on the split, otherwise a seeded sample of 10,
leaving out findings already judged. ``--findings FILE`` keeps the findings of a run, and a later
run given the same file reads them instead of running kcheck: the sample judged, the same findings
are measured again (still a look, and logged as one).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from corpus import load_fixes, load_manifest  # noqa: E402
from scan_corpus import _commit  # noqa: E402

LABELS = HERE / "labels"
LOOKS = HERE / "results" / "test-looks.md"
SAMPLE_PER_RULE = 10
SEED = 20261204
BAR_PRECISION = 0.80
BAR_WIDTH = 0.30


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (0, 1 when n is 0)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


def family(code: str) -> str:
    return code[:3]


# ---- running kcheck -------------------------------------------------------------------------------

KCHECK = [sys.executable, "-m", "kcheck"]


@functools.lru_cache(maxsize=1)
def _preview_flag() -> tuple[str, ...]:
    """``--preview`` where the measured kcheck has it (a commit from before preview rules has not),
    and ``--no-group``: labels judge each place, so every place is measured on its own."""
    help_text = subprocess.run([*KCHECK, "check", "--help"], capture_output=True, text=True).stdout
    return tuple(flag for flag in ("--preview", "--no-group") if flag in help_text)


def kcheck_findings(folder: Path, jobs: int, include: tuple[str, ...] = (), select: str = "ALL") -> list[dict]:
    """Every finding kcheck reports in ``folder`` (paths relative to it), every rule on (or those of
    ``select``); ``include``: the tree's ``extend_include`` globs (files holding Python under another
    name)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "findings.json"
        cmd = [*KCHECK, "check", ".", "-q", "--exit-zero", "--select", select,
               "-j", str(jobs), "-o", f"json:{out}", *_preview_flag(),
               *(arg for glob in include for arg in ("--extend-include", glob))]
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
        if proc.returncode not in (0, 1) or not out.exists():
            raise SystemExit(f"evaluate: kcheck failed on {folder.name} (exit {proc.returncode}): "
                             f"{proc.stderr.strip()[-2000:]}")
        data = json.loads(out.read_text())
    rows = data if isinstance(data, list) else data.get("findings", [])
    return [{"code": f["code"], "path": f["filename"], "line": f["location"]["row"],
             "end_line": f["end_location"]["row"], "message": f["message"],
             "related": [(r["location"]["row"], r["end_location"]["row"]) for r in f.get("related", ())]}
            for f in rows]


def scan_split(dest: Path, split: str, jobs: int, only: set[str] | None = None,
               select: str = "ALL") -> dict[str, list[dict]]:
    """tree name -> findings, for the split's trees present in ``dest`` (those in ``only`` when given);
    fixes under 'fixes/<id>/...'."""
    found: dict[str, list[dict]] = {}
    for t in load_manifest():
        if t["split"] != split or (only and t["name"] not in only):
            continue
        folder = dest / t["name"]
        if not folder.is_dir():
            print(f"evaluate: {t['name']} is not fetched in {dest}; run benchmarks/corpus.py fetch", file=sys.stderr)
            continue
        found[t["name"]] = kcheck_findings(folder, jobs, tuple(t.get("extend_include", ())), select)
    if split == "test" and (dest / "fixes").is_dir():  # fixes are test by rule (benchmarks/README.md)
        found["fixes"] = kcheck_findings(dest / "fixes", jobs)
    return found


# ---- labels ----------------------------------------------------------------------------------------

def load_labels(split_of: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """(recall-side labels incl. fixes, precision labels); each recall label has tree, path, lines,
    family, rule, verdict, origin."""
    recall: list[dict] = []
    for f in sorted((LABELS / "recall").glob("*.yaml")):
        for lab in (yaml.safe_load(f.read_text()) or {}).get("labels", []) or []:
            recall.append(dict(lab, origin=f"recall/{f.name}"))
    for fix in load_fixes():
        base = {"tree": "fixes", "family": fix["family"], "rule": fix.get("rule"), "reason": fix.get("reason", ""),
                "evidence": fix.get("evidence", ""), "origin": f"fix {fix['id']}"}
        recall.append(dict(base, path=f"{fix['id']}/pre/{fix['path']}", lines=fix["pre_lines"], verdict=True))
        recall.append(dict(base, path=f"{fix['id']}/post/{fix['path']}", lines=fix["post_lines"], verdict=False))
    precision: list[dict] = []
    for f in sorted((LABELS / "precision").glob("*.yaml")):
        precision += (yaml.safe_load(f.read_text()) or {}).get("labels", []) or []
    for lab in recall + precision:
        if lab["tree"] != "fixes" and lab["tree"] not in split_of:
            raise SystemExit(f"evaluate: a label names tree {lab['tree']!r}, which is not in corpus.yaml")
    return recall, precision or []


def _hits(lab: dict, findings: list[dict], by_rule: bool) -> list[dict]:
    lo, hi = lab["lines"]
    want = lab.get("rule") if by_rule else lab["family"]
    return [f for f in findings if f["path"] == lab["path"]
            and any(a <= hi and lo <= b for a, b in [(f["line"], f["end_line"]), *f.get("related", ())])
            and (f["code"] == want if by_rule else family(f["code"]) == want)]


# ---- measuring -------------------------------------------------------------------------------------

def measure(found: dict[str, list[dict]], recall: list[dict], precision: list[dict], trees: set[str]) -> dict:
    rec_fam = defaultdict(lambda: [0, 0])   # family -> [found, positives]
    rec_rule = defaultdict(lambda: [0, 0])
    alarms = defaultdict(lambda: [0, 0])    # family -> [negatives with a finding, negatives]
    missed, false_alarms = [], []
    for lab in recall:
        if lab["tree"] not in trees:
            continue
        findings = found.get(lab["tree"], [])
        fam = lab["family"]
        if lab["verdict"]:
            hit = bool(_hits(lab, findings, by_rule=False))
            rec_fam[fam][0] += hit
            rec_fam[fam][1] += 1
            if lab.get("rule"):
                rec_rule[lab["rule"]][0] += bool(_hits(lab, findings, by_rule=True))
                rec_rule[lab["rule"]][1] += 1
            if not hit:
                missed.append(lab)
        else:
            hits = _hits(lab, findings, by_rule=False)
            alarms[fam][0] += bool(hits)
            alarms[fam][1] += 1
            if hits:
                false_alarms.append(dict(lab, findings=[f"{h['code']}:{h['line']}" for h in hits]))
    counts = defaultdict(int)
    for tree, findings in found.items():
        for f in findings:
            counts[f["code"]] += 1
    index = {(tree, f["path"], f["line"], f["code"]) for tree, fs in found.items() for f in fs}
    prec_rule = defaultdict(lambda: [0, 0])
    judged_false, stale = [], []
    for lab in precision:
        if lab["tree"] not in trees:
            continue
        if lab.get("verdict") is None:
            continue
        key = (lab["tree"], lab["path"], lab["lines"][0], lab["rule"])
        if key not in index:
            stale.append(lab)
            continue
        prec_rule[lab["rule"]][0] += bool(lab["verdict"])
        prec_rule[lab["rule"]][1] += 1
        if not lab["verdict"]:
            judged_false.append(lab)
    prec_fam = defaultdict(lambda: [0, 0])
    for rule, (k, n) in prec_rule.items():
        prec_fam[family(rule)][0] += k
        prec_fam[family(rule)][1] += n

    def row(k: int, n: int) -> dict:
        lo, hi = wilson(k, n)
        return {"k": k, "n": n, "value": (k / n) if n else None, "low": lo, "high": hi}

    rules = sorted(set(counts) | set(prec_rule) | set(rec_rule))
    per_rule = {}
    for r in rules:
        p = row(*prec_rule[r])
        if r.startswith("KC9"):
            status = "meta"  # unparsable files and suppressions: not judged as kernel findings
        else:
            status = "stable" if p["n"] and p["value"] >= BAR_PRECISION and p["high"] - p["low"] <= BAR_WIDTH else "preview"
        per_rule[r] = {"findings": counts.get(r, 0), "precision": p, "recall": row(*rec_rule[r]), "status": status}
    fams = sorted(set(rec_fam) | set(prec_fam) | {family(r) for r in rules})
    per_family = {f: {"findings": sum(v for c, v in counts.items() if family(c) == f),
                      "precision": row(*prec_fam[f]), "recall": row(*rec_fam[f]),
                      "false_alarms": row(*alarms[f])} for f in fams}
    return {"rules": per_rule, "families": per_family,
            "missed": missed, "false_alarms": false_alarms, "judged_false": judged_false, "stale": stale}


def pct(r: dict) -> str:
    if not r["n"]:
        return "—"
    return f"{100 * r['value']:.0f}% ({100 * r['low']:.0f}–{100 * r['high']:.0f}) {r['k']}/{r['n']}"


def render(split: str, m: dict, meta: dict) -> str:
    out = [f"# kcheck on the {split} split", "",
           f"kcheck {meta['commit']}, {meta['date']}, Python {meta['python']}, trees: {', '.join(meta['trees'])}"
           + (f" (partial: {meta['partial']})" if meta.get("partial") else ""), "",
           "Intervals: Wilson 95 %. Precision from judged findings (`labels/precision/`); recall from "
           "positive labels (`labels/recall/`, and the pre-fix side of `labels/fixes.yaml` on the test split); "
           "false alarms: findings inside negative labels.", "",
           "| family | findings | precision | recall | false alarms on negatives |", "|---|---:|---|---|---|"]
    for f, r in m["families"].items():
        out.append(f"| {f}xx | {r['findings']} | {pct(r['precision'])} | {pct(r['recall'])} | {pct(r['false_alarms'])} |")
    out += ["", "| rule | findings | precision | recall | status |", "|---|---:|---|---|---|"]
    for code, r in m["rules"].items():
        out.append(f"| {code} | {r['findings']} | {pct(r['precision'])} | {pct(r['recall'])} | {r['status']} |")
    def lab_line(lab: dict, extra: str = "") -> str:
        return (f"- {lab['tree']}:{lab['path']}:{lab['lines'][0]}-{lab['lines'][-1]} "
                f"{lab.get('rule') or lab['family']} — {lab.get('reason', '')}{extra}")
    out += ["", f"## Missed ({len(m['missed'])}): positive labels with no finding of the family", ""]
    out += [lab_line(lab) for lab in m["missed"]]
    out += ["", f"## False alarms ({len(m['false_alarms'])}): findings inside negative labels", ""]
    out += [lab_line(lab, f" [{', '.join(lab['findings'])}]") for lab in m["false_alarms"]]
    out += ["", f"## Findings judged FALSE ({len(m['judged_false'])})", ""]
    out += [lab_line(lab) for lab in m["judged_false"]]
    out += ["", f"## Stale precision labels ({len(m['stale'])}): the judged finding is no longer reported", ""]
    out += [lab_line(lab) for lab in m["stale"]]
    return "\n".join(out) + "\n"


def draw_sample(found: dict[str, list[dict]], judged: list[dict], seed: int = SEED) -> list[dict]:
    """Per rule: every finding if at most SAMPLE_PER_RULE, else a seeded sample; minus judged ones."""
    done = {(lab["tree"], lab["path"], lab["lines"][0], lab["rule"]) for lab in judged}
    pool = defaultdict(list)
    for tree, fs in found.items():
        if tree == "fixes":
            continue  # the fixes' files are judged by their fix, not sampled
        for f in fs:
            if not f["code"].startswith("KC9"):  # meta rules judge suppressions, not kernels
                pool[f["code"]].append((tree, f["path"], f["line"], f["code"], f["end_line"], f["message"]))
    todo = []
    for code in sorted(pool):
        items = sorted(pool[code])
        pick = items if len(items) <= SAMPLE_PER_RULE else random.Random(f"{seed}:{code}").sample(items, SAMPLE_PER_RULE)
        for tree, path, line, c, end, msg in sorted(pick):
            if (tree, path, line, c) not in done:
                todo.append({"tree": tree, "path": path, "lines": [line, end], "rule": c, "family": c[:3],
                             "verdict": None, "reason": "", "message": msg})
    return todo


def log_look(split: str, m: dict, meta: dict, why: str) -> None:
    fams = ", ".join(f"{f}xx P {pct(r['precision']).split(' (')[0]} R {pct(r['recall']).split(' (')[0]}"
                     for f, r in m["families"].items() if f != "KC9")
    line = f"| {meta['date']} | {meta['commit']} | {why} | {fams} |\n"
    if not LOOKS.exists():
        LOOKS.parent.mkdir(parents=True, exist_ok=True)
        LOOKS.write_text("# Looks at the test split\n\nEvery run of `evaluate.py` on the test split, as it "
                         "happened (benchmarks/README.md: the protocol).\n\n| date | commit | why | figures |\n"
                         "|---|---|---|---|\n")
    with LOOKS.open("a") as fh:
        fh.write(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", type=Path, help="where benchmarks/corpus.py fetched the trees")
    ap.add_argument("--split", choices=("dev", "test"), required=True)
    ap.add_argument("--out", type=Path, help="write <out>-<split>.json and .md")
    ap.add_argument("--sample", type=Path, help="write the precision sample still to judge to FOLDER/KC<n>.yaml")
    ap.add_argument("--why", default="measurement", help="test split: the reason logged for this look")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--kcheck", help="the command that runs kcheck (default: this Python's -m kcheck); "
                                     "for measuring another commit, installed elsewhere")
    ap.add_argument("--commit", help="the commit --kcheck runs, for the record (default: this checkout's)")
    ap.add_argument("--tree", action="append", default=[], help="dev split only: measure just this tree "
                    "(repeatable), for quick tuning; the report says it is partial")
    ap.add_argument("--select", default="ALL", help="dev split only: the rules kcheck runs (its --select), "
                    "for quick tuning; families with no selected rule are left out of the report")
    ap.add_argument("--findings", type=Path, help="keep kcheck's findings in this JSON file; when it exists "
                    "already, read them from it instead of running kcheck (the same findings measured again "
                    "against labels added since, for instance a freshly judged sample)")
    args = ap.parse_args(argv)
    partial = bool(args.tree) or args.select != "ALL"
    if partial and args.split == "test":
        ap.error("--tree and --select are for tuning on the dev split; the test split is measured whole")
    if args.kcheck:
        KCHECK[:] = args.kcheck.split()
    manifest = load_manifest()
    split_of = {t["name"]: t["split"] for t in manifest}
    trees = {n for n, s in split_of.items() if s == args.split and (args.dest / n).is_dir()
             and (not args.tree or n in args.tree)}
    if args.split == "test":
        trees.add("fixes")
    kept = json.loads(args.findings.read_text()) if args.findings and args.findings.exists() else None
    if kept is not None:
        if (kept["split"], kept["select"], kept["trees"]) != (args.split, args.select, sorted(args.tree)):
            ap.error(f"{args.findings} holds findings of --split {kept['split']} --select {kept['select']} "
                     f"--tree {kept['trees']}, not of this run's")
        found, args.commit = kept["found"], args.commit or kept["commit"]
    else:
        found = scan_split(args.dest, args.split, args.jobs, set(args.tree), args.select)
        if args.findings:
            args.findings.parent.mkdir(parents=True, exist_ok=True)
            args.findings.write_text(json.dumps({"split": args.split, "select": args.select, "trees": sorted(args.tree),
                                                 "commit": args.commit or _commit(), "found": found}) + "\n")
    recall, precision = load_labels(split_of)
    if args.select != "ALL":
        codes = [c.strip() for c in args.select.split(",")]
        wanted = {family(c) for c in codes}
        recall = [lab for lab in recall if lab["family"] in wanted]
        precision = [lab for lab in precision if any(lab["rule"].startswith(c) for c in codes)]
    m = measure(found, recall, precision, trees)
    meta = {"commit": args.commit or _commit(), "date": datetime.date.today().isoformat(),
            "python": sys.version.split()[0], "trees": sorted(t for t in trees if t in found)}
    if partial:
        meta["partial"] = f"--select {args.select}" + "".join(f" --tree {t}" for t in args.tree)
    text = render(args.split, m, meta)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{args.out}-{args.split}.md").write_text(text)
        Path(f"{args.out}-{args.split}.json").write_text(json.dumps({"meta": meta, **m}, indent=1, default=str) + "\n")
    if args.sample:
        todo = draw_sample(found, precision)
        args.sample.mkdir(parents=True, exist_ok=True)
        for fam in sorted({lab["family"] for lab in todo}):
            mine = [lab for lab in todo if lab["family"] == fam]
            (args.sample / f"{fam}.yaml").write_text(yaml.safe_dump({"labels": mine}, sort_keys=False, width=120))
        print(f"evaluate: {len(todo)} findings to judge written to {args.sample}/KC*.yaml", file=sys.stderr)
    if args.split == "test":
        log_look(args.split, m, meta, args.why)
    return 0


if __name__ == "__main__":
    sys.exit(main())
