"""Suppression comments: where they apply, names and prefixes, reasons, and the KC9xx meta rules."""

from __future__ import annotations

from conftest import findings_for

TIMED = """
import torch
def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    start.record()
    {line}
    end.record()
"""


def codes(src, **cfg):
    cfg.setdefault("select", ("KC2", "KC9"))  # the measurement-shape rules would also fire on TIMED
    return sorted((f.line, f.code) for f in findings_for(src, **cfg))


def test_unsuppressed_finding_is_reported():
    assert codes(TIMED.format(line="fn(x).item()")) == [(5, "KC201")]


def test_trailing_comment_with_code_and_reason():
    assert codes(TIMED.format(line="fn(x).item()  # kcheck: ignore[KC201] measured on purpose")) == []


def test_rule_name_and_prefix_work_like_codes():
    assert codes(TIMED.format(line="fn(x).item()  # kcheck: ignore[host-sync-in-timed-region] on purpose")) == []
    assert codes(TIMED.format(line="fn(x).item()  # kcheck: ignore[KC2] whole family, on purpose")) == []


def test_comment_on_line_above_covers_next_statement_only():
    src = """
import torch
def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    start.record()
    # kcheck: ignore[KC201] this one is deliberate
    fn(x).item()
    fn(x).tolist()
    end.record()
"""
    assert codes(src) == [(7, "KC201")]


def test_multiline_statement_is_covered_from_its_first_line():
    src = """
import torch
def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    start.record()
    total = (  # kcheck: ignore[KC201] deliberate
        fn(x)
        .item()
    )
    end.record()
"""
    assert codes(src) == []


def test_other_code_does_not_suppress():
    assert codes(TIMED.format(line="fn(x).item()  # kcheck: ignore[KC203] wrong rule")) == [(5, "KC201"), (5, "KC901")]


def test_noqa_with_kcheck_code_is_honoured_and_bare_noqa_is_not():
    assert codes(TIMED.format(line="fn(x).item()  # noqa: KC201 deliberate")) == []
    assert codes(TIMED.format(line="fn(x).item()  # noqa")) == [(5, "KC201")]
    assert codes(TIMED.format(line="fn(x).item()  # noqa: E501")) == [(5, "KC201")]
    # any case, as ruff reads it, and after other codes
    assert codes(TIMED.format(line="fn(x).item()  # NOQA: kc201 deliberate")) == []
    assert codes(TIMED.format(line="fn(x).item()  # noqa: E501, KC201 deliberate")) == []


def test_file_ignore_covers_the_whole_file():
    src = "# kcheck: file-ignore[KC2] benchmark of sync cost\n" + TIMED.format(line="fn(x).item()")
    assert codes(src) == []


def test_reason_is_required_by_default_and_optional_by_config():
    src = TIMED.format(line="fn(x).item()  # kcheck: ignore[KC201]")
    assert codes(src) == [(5, "KC902")]
    assert codes(src, require_suppression_reason=False) == []


def test_blanket_suppression_works_but_is_reported():
    assert codes(TIMED.format(line="fn(x).item()  # kcheck: ignore deliberate")) == [(5, "KC903")]


def test_unused_and_unknown_suppressions_are_reported():
    assert codes("x = 1  # kcheck: ignore[KC201] stale\n") == [(1, "KC901")]
    assert codes("x = 1  # kcheck: ignore[KC777] typo\n") == [(1, "KC901")]


def test_suppression_of_disabled_rule_is_not_unused():
    assert codes("x = 1  # kcheck: ignore[KC201] stale\n", ignore=("KC201",)) == []


def test_comment_text_inside_strings_is_not_a_directive():
    src = TIMED.format(line='fn(x).item(); s = "# kcheck: ignore[KC201] nope"')
    assert codes(src) == [(5, "KC201")]


def test_suppressed_findings_keep_their_reason():
    from kcheck.config import Config
    from kcheck.engine import check_source

    import inspect

    src = inspect.cleandoc(TIMED.format(line="fn(x).item()  # kcheck: ignore[KC201] measured on purpose")) + "\n"
    result = check_source(src, "b.py", Config())
    (finding,) = [f for f in result.findings if f.code == "KC201"]
    assert finding.suppressed == "measured on purpose"
