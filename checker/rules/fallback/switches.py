"""A requested kernel switched off without a word (KC304's second shape).

A setting the caller or the configuration asked for (``persist = self.config.persist_layer_norm``,
a ``use_fused=True`` parameter) is set to False under a test of what the machine or the
input supports (a size outside the supported list, a missing library flag such as ``HAVE_APEX``,
the device capability, a version), and the branch that does it says nothing. The run then uses
the other path while the settings still say the kernel is on. A test on the environment
(``os.environ``) is the user's own choice and does not count.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

import libcst as cst

from kcheck.facts import fact
from kcheck.gate import nodes_of
from kcheck.claims import _walk
from kcheck.model import walk
from kcheck.project import TEST_PATH
from kcheck.rules.fallback import NOT_SERVED, announces, statements

CONFIG_ROOTS = {"config", "cfg", "args", "opts", "options", "settings", "conf", "quant_config", "model_config"}
# A name that says whether something is installed or supported: HAVE_APEX, FLASH_AVAILABLE, has_triton.
SUPPORT_FLAG = re.compile(r"^_?(HAVE|HAS|CAN)_[A-Z0-9_]+$|[A-Z0-9]_(AVAILABLE|SUPPORTED|INSTALLED)$|^_?has_\w+"
                          r"|_(available|supported|installed)$")
SUPPORT_CALL = re.compile(r"(get_device_capability|is_available|_supported|_available|is_sm\d+\w*|version)$")
# ``x in S`` asks about support when x is an input's size, dtype, head or the chip, or S names what is supported.
INPUT_PROP = re.compile(r"(size|dim|dtype|head|shape|arch|capab|(^|_)sm)\w*$", re.I)
SUPPORTED_SET = re.compile(r"support|sizes|dims|dtypes|archs|capab", re.I)
OFF = ("False",)  # a switch turned off; None is as often data cleared (``logits = None``)


def _key(model, node: cst.CSTNode) -> str | None:
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value in ("self", "cls"):
        return model.dotted(node)
    return None


def _turned_off(model, node: cst.If) -> list[str]:
    """The settings the ``if`` body only turns off, or [] when it does anything else."""
    keys = []
    for stmt in statements(node.body):
        if type(stmt) is not cst.SimpleStatementLine:
            return []
        for small in stmt.body:
            if type(small) is cst.Pass:
                continue
            if type(small) is not cst.Assign or type(small.value) is not cst.Name or small.value.value not in OFF:
                return []
            for target in small.targets:
                key = _key(model, target.target)
                if key is None:
                    return []
                keys.append(key)
    return keys


def _support_test(model, test: cst.CSTNode) -> bool:
    """Whether ``test`` asks what the machine, the install or the input supports."""
    found = False
    for n in _walk(test):
        name = model.dotted(n) if type(n) in (cst.Name, cst.Attribute) else None
        if name and (name.startswith("os.environ") or name.endswith("getenv")):
            return False  # the user's own switch
        if type(n) is cst.Name and SUPPORT_FLAG.search(n.value):
            found = True
        elif type(n) is cst.Call and SUPPORT_CALL.search(model.call_name(n) or model.dotted(n.func) or ""):
            found = True
        elif type(n) is cst.Comparison and any(
                type(c.operator) in (cst.In, cst.NotIn) and _named_or_literal(c.comparator) and (
                    INPUT_PROP.search(model.dotted(n.left) or "") or SUPPORTED_SET.search(model.dotted(c.comparator) or ""))
                for c in n.comparisons):
            found = True  # ``hidden_size not in PERSIST_SIZES``: an input outside what the kernel takes
        elif type(n) is cst.Comparison and type(n.left) is cst.BinaryOperation and type(n.left.operator) is cst.Modulo \
                and type(n.left.right) is cst.Integer and any(
                    type(c.operator) in (cst.NotEqual, cst.Equal) and type(c.comparator) is cst.Integer
                    and c.comparator.value == "0" for c in n.comparisons):
            found = True  # ``infeatures % 64 != 0``: a size the kernel's tiles do not divide
    return found


def _named_or_literal(node: cst.CSTNode) -> bool:
    """A set of supported values: a name (``PERSIST_SIZES``) or a literal of constants. A literal
    holding another argument (``group_size in (-1, in_features)``) compares arguments with each
    other: a case where the setting means nothing, not a support test."""
    if type(node) in (cst.Name, cst.Attribute):
        return True
    if type(node) not in (cst.List, cst.Tuple, cst.Set):
        return False
    return all(type(e.value) in (cst.Integer, cst.Float, cst.SimpleString) or type(e.value) is cst.UnaryOperation
               and type(e.value.expression) in (cst.Integer, cst.Float) for e in node.elements)


def _requested(model, fn: cst.FunctionDef, key: str) -> bool:
    """Whether ``key`` holds what the caller or the configuration asked for: a parameter of ``fn``,
    or assigned in ``fn`` from a configuration read (``self.config.persist_layer_norm``), a
    parameter, or a flag saying the kernel is installed (``self.cuda_ok = _ext_available``: on
    wherever it can be)."""
    params = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params)}
    if key in params:
        return True
    for n in _walk(fn.body):
        if type(n) is not cst.Assign or not any(_key(model, t.target) == key for t in n.targets):
            continue
        value = n.value
        if type(value) is cst.Name and (value.value in params or SUPPORT_FLAG.search(value.value)):
            return True
        dotted = model.dotted(value) if type(value) in (cst.Name, cst.Attribute) else None
        if dotted and any(part in CONFIG_ROOTS for part in dotted.split(".")[:-1]):
            return True
    return False


def _announced_later(model, fn: cst.FunctionDef, node: cst.If, key: str) -> bool:
    """A later ``if`` in ``fn`` tests the setting and warns (``if not persist: logger.info(...)``)."""
    for n in _walk(fn.body):
        if type(n) is cst.If and n is not node and any(
                _key(model, m) == key for m in _walk(n.test)) and announces(model, statements(n.body)):
            return True
    return False


def switched_off(model) -> Iterator[tuple[cst.If, str]]:
    """Each ``if`` that silently turns a requested setting off under a support test, with the setting."""
    if TEST_PATH.search(model.path):
        return
    for node in walk(model.module):
        if type(node) is not cst.If or node.orelse is not None:
            continue
        keys = _turned_off(model, node)
        if not keys or not _support_test(model, node.test) or announces(model, statements(node.body)):
            continue
        fn = model.enclosing_function(node)
        if fn is None:
            continue
        for key in keys:
            if _requested(model, fn, key) and not _announced_later(model, fn, node, key):
                yield node, key
                break


@fact("setting switched off")
def setting_switched_off(summary, config) -> bool:
    """Looser than :func:`switched_off`: an ``if`` without ``else`` whose body only assigns False or
    None (or passes)."""
    if summary.tree is None or TEST_PATH.search(summary.path):
        return False
    for node in nodes_of(summary, ast.If):
        if not node.orelse and node.body and all(
                isinstance(s, (ast.Assign, ast.Pass)) and (isinstance(s, ast.Pass) or isinstance(s.value, ast.Constant)
                                                           and s.value.value in (False, None)) for s in node.body):
            return True
    return False


# A parameter that asks for a kernel by name: ``use_flash_attn``, ``use_triton``, ``use_fused_rope``,
# ``use_cuda_kernel``, ``use_marlin``.
KERNEL_REQUEST = re.compile(
    r"^_?use_((flash|fused|triton|cutlass|marlin|exllama|xformers|apex|liger|deep_?gemm|flashinfer|cudnn|tilelang"
    r"|sdpa|custom_op|cuda_kernel)\w*|\w+(?<!_in)_(kernels?|triton|ext|extension))$")
# Not a kernel choice: an option of the kernel (``use_qk_l2norm_in_kernel``), a CUDA graph.
STUB_DECORATORS = {"abstractmethod", "overload", "override"}


def ignored_requests(model) -> Iterator[tuple[cst.Param, str]]:
    """Each switch parameter that asks for a kernel by default (:data:`KERNEL_REQUEST`, defaulting to
    True) that its function never reads: the kernel every default call asks for is dropped without a
    word (an eval script's ``--no_use_flash_attn`` that changes nothing either). A switch defaulting
    to False that nothing reads asks for nothing unless a caller sets it (a leftover signature kept
    beside its siblings'). Stubs, abstract methods and functions that hand ``locals()`` on are left
    alone."""
    if TEST_PATH.search(model.path) or NOT_SERVED.search(model.path):
        return
    for fn in (n for n in walk(model.module) if type(n) is cst.FunctionDef):
        params = [p for p in (*fn.params.params, *fn.params.kwonly_params) if KERNEL_REQUEST.search(p.name.value)
                  and type(p.default) is cst.Name and p.default.value == "True"]
        if not params or _stub(model, fn):
            continue
        read = {n.value for n in _walk(fn.body) if type(n) is cst.Name}
        if read & {"locals", "vars"}:
            continue
        for p in params:
            if p.name.value not in read:
                yield p, p.name.value


def _stub(model, fn: cst.FunctionDef) -> bool:
    if any((model.dotted(d.decorator.func if type(d.decorator) is cst.Call else d.decorator) or "").split(".")[-1]
           in STUB_DECORATORS for d in fn.decorators):
        return True
    body = [s for s in statements(fn.body) if not (
        type(s) is cst.SimpleStatementLine and all(type(x) is cst.Expr and type(x.value) in (
            cst.SimpleString, cst.ConcatenatedString, cst.Ellipsis) for x in s.body))]
    return all(type(s) is cst.SimpleStatementLine and all(type(x) in (cst.Pass, cst.Raise) or type(x) is cst.Return
                                                          and x.value is None for x in s.body) for s in body)


@fact("kernel request ignored")
def kernel_request_ignored(summary, config) -> bool:
    """Looser than :func:`ignored_requests`: a function parameter named like a kernel request."""
    if summary.tree is None or TEST_PATH.search(summary.path) or NOT_SERVED.search(summary.path):
        return False
    if summary.source is not None and "use_" not in summary.source:
        return False  # every kernel request's name holds ``use_``
    for node in nodes_of(summary, ast.FunctionDef, ast.AsyncFunctionDef):
        if any(KERNEL_REQUEST.search(a.arg) for a in (*node.args.args, *node.args.kwonlyargs)):
            return True
    return False
