from __future__ import annotations

from kcheck.rule import Rule


class SuppressionWithoutReason(Rule):
    """A suppression comment that does not say why.

    ## What it does
    Reports a `# kcheck: ignore[...]`, `# kcheck: file-ignore[...]` or `# noqa: KC...` comment
    with no reason after the rule list. Turn it off with `require-suppression-reason = false`.

    ## Why is this bad?
    A reviewer cannot tell a deliberate, measured exception from a finding silenced to get a
    commit through. The reason is also what SARIF shows as the suppression's justification.

    ## Example
    ```python
    n = counts.sum().item()  # kcheck: ignore[KC203]
    ```

    ## Use instead
    ```python
    n = counts.sum().item()  # kcheck: ignore[KC203] once per batch, sizes the output buffer
    ```
    """

    CODE = "KC902"
    NAME = "suppression-without-reason"
    MESSAGE = "suppression of {rule} gives no reason"
    SEVERITY = "warning"
    OPTIONS = ("require-suppression-reason",)
    VALID = ["x = 1  # kcheck: file-ignore[KC1] reference implementations only\n"]
    INVALID = ["x = 1  # kcheck: file-ignore[KC1]\n"]
