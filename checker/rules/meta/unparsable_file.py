from __future__ import annotations

from kcheck.rule import Rule


class UnparsableFile(Rule):
    """A file kcheck could not read or parse.

    ## What it does
    Reports a file that is not valid Python, is not UTF-8, or cannot be read, with the line
    where parsing stopped. The scan goes on with the other files.

    ## Why is this bad?
    kcheck cannot check what it cannot parse, so a broken file would otherwise pass silently.
    Python would refuse to import it too.

    ## Example
    ```python
    def forward(self, x)
        return x
    ```

    ## Use instead
    ```python
    def forward(self, x):
        return x
    ```
    """

    CODE = "KC900"
    NAME = "unparsable-file"
    MESSAGE = "cannot parse: {reason}"
    SEVERITY = "error"
    VALID = ["x = 1\n"]
    INVALID = ["def forward(self, x)\n    return x\n"]
