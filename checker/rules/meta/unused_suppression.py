from __future__ import annotations

from kcheck.rule import Rule


class UnusedSuppression(Rule):
    """A suppression comment that hides nothing.

    ## What it does
    Reports a `# kcheck: ignore[...]` or `# noqa: KC...` comment whose rules report nothing on
    the statement it covers, or that names a rule that does not exist.

    ## Why is this bad?
    Stale suppressions outlive the code they were written for and silently hide the next real
    finding on that line. Removing them keeps every suppression meaningful.

    ## Example
    ```python
    total = x.sum()  # kcheck: ignore[KC201] warm-up only
    ```

    ## Use instead
    ```python
    total = x.sum()
    ```
    """

    CODE = "KC901"
    NAME = "unused-suppression"
    MESSAGE = "unused suppression of {rule}: nothing here is reported"
    SEVERITY = "warning"
    VALID = [
        """
import torch
def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn(x).item()  # kcheck: ignore[KC201] the sync is part of what this measures
    end.record()
""",
    ]
    INVALID = ["total = 1 + 2  # kcheck: ignore[KC201] stale\n", "x = 1  # kcheck: ignore[KC999] typo\n"]
