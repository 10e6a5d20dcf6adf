from __future__ import annotations

from kcheck.rule import Rule


class BlanketSuppression(Rule):
    """A suppression comment that names no rule.

    ## What it does
    Reports `# kcheck: ignore` without a `[...]` list of rule codes or names.

    ## Why is this bad?
    A blanket suppression hides every rule on the statement, including the ones added later,
    so it silences findings nobody has looked at.

    ## Example
    ```python
    torch.cuda.synchronize()  # kcheck: ignore measured on purpose
    ```

    ## Use instead
    ```python
    torch.cuda.synchronize()  # kcheck: ignore[KC201] measured on purpose
    ```
    """

    CODE = "KC903"
    NAME = "blanket-suppression"
    MESSAGE = "blanket suppression: name the rules it hides"
    SEVERITY = "warning"
    VALID = ["x = 1  # kcheck: file-ignore[KC1] reference code\n"]
    INVALID = ["x = 1  # kcheck: ignore nothing to see\n"]
