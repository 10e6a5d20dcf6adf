"""Conditions a kernel launch waits on that the workload does not meet by default.

An authored kernel can sit behind a test that is false as the code is run: an opt-in environment
flag (``FLAG = bool(int(os.getenv("X_ENABLE", 0)))``, ``os.environ.get("X") == "1"``) or, in a
solution, ``x.requires_grad`` of an input tensor (a benchmark's inputs are plain tensors that do
not require grad). Such a kernel is dormant: the library op on the other branch does the work.
These helpers evaluate a branch test under those defaults, three-valued (True, False, None for
"cannot say"), and find the test that keeps a launch from running.
"""

from __future__ import annotations

import libcst as cst

_ENV_GETTERS = ("os.getenv", "os.environ.get")
_CASTS = {"int": int, "bool": bool, "str": str, "float": float}
_UNKNOWN = object()


def _literal(node: cst.CSTNode):
    """The value of a string, number, None/True/False literal, or a tuple/list/set of them."""
    kind = type(node)
    if kind in (cst.SimpleString, cst.ConcatenatedString):
        value = node.evaluated_value
        return value if isinstance(value, str) else _UNKNOWN
    if kind is cst.Integer:
        return int(node.value.replace("_", ""), 0)
    if kind is cst.Name and node.value in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[node.value]
    if kind in (cst.Tuple, cst.List, cst.Set):
        items = [_literal(e.value) for e in node.elements]
        return _UNKNOWN if any(i is _UNKNOWN for i in items) else tuple(items)
    return _UNKNOWN


def env_default(model, node: cst.CSTNode, flags: dict):
    """What an expression over an environment lookup evaluates to when the variable is unset
    (``os.getenv("X", "0")`` -> "0", ``bool(int(os.getenv("X", 0)))`` -> False,
    ``os.environ.get("X", "").lower() in ("1", "true")`` -> False); ``_UNKNOWN`` otherwise."""
    kind = type(node)
    if kind is cst.Name and node.value in flags:
        return flags[node.value]
    if kind is cst.Call:
        name = model.call_name(node) or ""
        if name in _ENV_GETTERS and node.args and type(node.args[0].value) in (cst.SimpleString, cst.ConcatenatedString):
            if len(node.args) == 1:
                return None
            return _literal(node.args[1].value)
        if type(node.func) is cst.Name and node.func.value in _CASTS and len(node.args) == 1:
            inner = env_default(model, node.args[0].value, flags)
            if inner is _UNKNOWN or inner is None and node.func.value != "bool":
                return _UNKNOWN
            try:
                return _CASTS[node.func.value](inner)
            except (TypeError, ValueError):
                return _UNKNOWN
        if type(node.func) is cst.Attribute and node.func.attr.value in ("lower", "upper", "strip") and not node.args:
            inner = env_default(model, node.func.value, flags)
            return getattr(inner, node.func.attr.value)() if isinstance(inner, str) else _UNKNOWN
        return _UNKNOWN
    if kind is cst.Comparison and len(node.comparisons) == 1:
        left = env_default(model, node.left, flags)
        target = node.comparisons[0]
        right = _literal(target.comparator)
        if left is _UNKNOWN or right is _UNKNOWN:
            return _UNKNOWN
        op = type(target.operator)
        if op is cst.Equal:
            return left == right
        if op is cst.NotEqual:
            return left != right
        if op is cst.In and isinstance(right, tuple):
            return left in right
        if op is cst.NotIn and isinstance(right, tuple):
            return left not in right
        return _UNKNOWN
    if kind is cst.UnaryOperation and type(node.operator) is cst.Not:
        inner = env_default(model, node.expression, flags)
        return _UNKNOWN if inner is _UNKNOWN else not inner
    return _UNKNOWN


def env_flags(model) -> dict:
    """Module-level names bound once to an environment lookup, with their value when the variable
    is unset (``AUTOTUNER_ENABLE = bool(int(os.getenv("TORCHAO_AUTOTUNER_ENABLE", 0)))``)."""
    cached = getattr(model, "_dispatch_env_flags", None)
    if cached is not None:
        return cached
    flags: dict = {}
    bound: dict[str, int] = {}
    module = getattr(model, "_claim_module", None)
    for stmt in module.body if module is not None else ():
        if type(stmt) is not cst.SimpleStatementLine:
            continue
        for small in stmt.body:
            if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name:
                name = small.targets[0].target.value
                bound[name] = bound.get(name, 0) + 1
                value = env_default(model, small.value, flags)
                code = cst.Module([]).code_for_node(small.value)
                if value is not _UNKNOWN and ("environ" in code or "getenv" in code):
                    flags[name] = value
    flags = {k: v for k, v in flags.items() if bound.get(k) == 1}
    model._dispatch_env_flags = flags
    return flags


def truth(model, test: cst.CSTNode, inputs: frozenset[str], flags: dict) -> bool | None:
    """Whether ``test`` holds by default: environment flags unset, and (for a solution's inputs,
    ``inputs``) tensors that do not require grad. None when it cannot say."""
    kind = type(test)
    if kind is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = truth(model, test.expression, inputs, flags)
        return None if inner is None else not inner
    if kind is cst.BooleanOperation:
        left, right = truth(model, test.left, inputs, flags), truth(model, test.right, inputs, flags)
        if type(test.operator) is cst.And:
            return False if False in (left, right) else (True if left is True and right is True else None)
        return True if True in (left, right) else (False if left is False and right is False else None)
    if kind is cst.Attribute and test.attr.value == "requires_grad" and type(test.value) is cst.Name \
            and test.value.value in inputs:
        return False
    value = env_default(model, test, flags)
    if value is _UNKNOWN:
        return None
    return bool(value)


def _ends_flow(block) -> bool:
    body = getattr(block, "body", ())
    return bool(body) and type(body[-1]) is cst.SimpleStatementLine and any(
        type(s) in (cst.Return, cst.Raise) for s in body[-1].body)


def dormant_test(model, node: cst.CSTNode, inputs: frozenset[str]) -> cst.CSTNode | None:
    """The ``if`` statement of ``node``'s function that keeps ``node`` from running by default:
    one whose branch holding ``node`` is not taken, or an early ``if <holds>: return ...`` before
    it in an enclosing block. None when nothing says so."""
    flags = env_flags(model)
    child = node
    for anc in model.ancestors(node):
        kind = type(anc)
        if kind in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return None
        if kind is cst.If:
            held = truth(model, anc.test, inputs, flags)
            if (child is anc.body and held is False) or (child is anc.orelse and held is True):
                return anc
        elif kind is cst.IfExp:
            held = truth(model, anc.test, inputs, flags)
            if (child is anc.body and held is False) or (child is anc.orelse and held is True):
                return anc
        elif kind is cst.IndentedBlock:
            for stmt in anc.body:
                if stmt is child:
                    break
                if type(stmt) is cst.If and stmt.orelse is None and _ends_flow(stmt.body) \
                        and truth(model, stmt.test, inputs, flags) is True:
                    return stmt
        child = anc
    return None
