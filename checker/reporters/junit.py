"""``junit``: JUnit XML for CI systems that show test reports: one test suite per file with
findings, one failed test case per finding; a clean run is one passing test case. A file kcheck did
not check is a skipped test case."""

from __future__ import annotations

from collections import defaultdict
from xml.etree import ElementTree as ET

from kcheck.finding import Finding


def render(findings: list[Finding], ctx) -> str:
    shown = [f for f in findings if f.suppressed is None]
    by_file: dict[str, list[Finding]] = defaultdict(list)
    for f in shown:
        by_file[f.path].append(f)
    root = ET.Element("testsuites", name="kcheck", tests=str(max(1, len(shown))), failures=str(len(shown)))
    if not shown:
        suite = ET.SubElement(root, "testsuite", name="kcheck", tests="1", failures="0")
        ET.SubElement(suite, "testcase", name="No findings", classname="kcheck")
    for path in sorted(by_file):
        group = by_file[path]
        shown_path = ctx.display_path(group[0])
        suite = ET.SubElement(root, "testsuite", name=shown_path, tests=str(len(group)), failures=str(len(group)))
        for f in group:
            case = ET.SubElement(suite, "testcase", name=f"kcheck.{f.code}.{f.name}", classname=shown_path,
                                 file=shown_path, **({} if f.cell else {"line": str(f.line)}))
            failure = ET.SubElement(case, "failure", message=f.message, type=f.severity)
            failure.text = f"{shown_path}:{f.where}: {f.code} [{f.name}] {f.message}\nDocs: {f.url}"
    for f in ctx.not_checked:
        shown_path = ctx.display_path(f)
        suite = ET.SubElement(root, "testsuite", name=shown_path, tests="1", failures="0", skipped="1")
        case = ET.SubElement(suite, "testcase", name="kcheck.not-checked", classname=shown_path, file=shown_path)
        ET.SubElement(case, "skipped", message=f.message)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
