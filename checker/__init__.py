"""kcheck: a knowledge base and static checker for GPU serving kernels.

Importing this package is cheap: it never imports torch, triton, libcst or jsonschema.
"""

__version__ = "0.1.0"
