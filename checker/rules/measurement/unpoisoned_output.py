from __future__ import annotations

import re

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.measurement import (
    EMPTY_FACTORIES, Scope, calls, is_compare, last, mocked, nodes_under,
)

FILLS = {"fill_", "copy_", "normal_", "uniform_", "random_", "fill_diagonal_"}
REFERENCE_BUFFER = re.compile(r"(^|_)(ref|reference|expected|expect|baseline|golden|gold|naive)(_|$)", re.IGNORECASE)


class UnpoisonedOutput(Rule):
    """An unpoisoned `torch.empty` output compared where memory could already hold the answer.

    ## What it does
    In test and benchmark code, finds a buffer allocated with `torch.empty`, `torch.empty_like`,
    `torch.empty_strided` or `.new_empty`, handed to a call that writes it (the kernel under
    test, or its wrapper), and later compared, with no fill before the call: no
    `.fill_(float("nan"))` or other non-zero fill, no `.copy_`, no random fill. It reports such a
    buffer only when something in the test could have left the expected answer in the memory the
    buffer gets, so that a write the kernel misses can pass; the message says which:

    - the buffer is compared with another unpoisoned `torch.empty` buffer written by the same
      computation (the same function, its `torch.compile`d or `functools.partial` form, or the
      same op called a slice at a time): if the kernel writes nothing, both keep what the
      allocator handed out (zeros in a fresh segment) and agree. Not when the test asserts that
      the two differ (`assert not torch.allclose(a, b)`), nor when some function of the module
      compares that op's output with an independent reference (a reference implementation's
      result, a ground truth, a constant other than zeros): a write both runs miss fails there,
      and one that a single run misses fails here;
    - it is allocated and written inside a loop whose passes compute the same answer (inputs made
      outside the loop or drawn after re-seeding with the same seed, arguments that do not follow
      the loop variables): the block freed by the previous pass holds that answer;
    - the same computation ran before the allocation and its returned result was dropped (a
      warm-up): its freed block can be the one the buffer gets;
    - an index map or id tensor that reaches the kernel marks entries with `-1` (`ids[0] = -1`,
      `.masked_fill(m, -1)`, `torch.where(m, ids, -1)`, `torch.tensor([0, -1, 1])`): unrouted
      tokens and experts of another rank have zeros in the expected output. A `-1` written into
      the expected tensor, or into the tensor the buffer is only shaped like, is no input; and a
      data row set to 0 (`x[0] = 0`) is no evidence: what the reference makes of a zero row (a
      scale with an epsilon floor, a statistic, a quantised code) is seldom zero;
    - a tensor of `torch.zeros` is data for both the kernel and the reference (not a workspace,
      cache, index or other buffer the name says is scratch or layout): the answer is zeros;
    - the test is parametrized with a size of 0 that the buffer's own shape does not name
      (`kv_len=0` for an output of `qo_len` rows); a buffer that size makes empty, directly or
      through the tensor it is shaped like, hides nothing.

    The last two hold for outputs linear in the inputs (`o = P @ V`), not for a normaliser or
    statistic: a buffer whose name has the word `lse`, `max`, `amax`, `scale`, `sf`, `alpha`,
    `norm`, `rstd`, `mean`, `var` (and the like) is not reported on them, since the log-sum-exp of
    an empty row is -inf and of n zero scores log(n), and a scale of zeros keeps its floor.

    A buffer handed to several writing calls (an eager run, a graph capture, replays) is left
    alone: a fill at allocation guards the first write only. With none of these, the kernel runs
    on inputs nothing else computed the answer from into freed memory (its first run on fresh
    random inputs, or an earlier result the test keeps alive), and an element it misses fails the
    comparison. Buffers written by a `torch.*` operator (`out=` of a library op writes every
    element) are not reported, and neither are the reference's own outputs (`ref_out`,
    `expected`, `baseline`). Tests on stand-ins (`monkeypatch`, `Mock`, `patch`) check dispatch,
    not a kernel's writes, and are left alone.

    ## Why is this bad?
    `torch.empty` does not clear memory. The caching allocator hands back the block that a warm-up,
    the previous pass of a loop or the previous test case just freed, and a fresh segment is
    zeros, so when the expected answer is zeros or was computed before, the buffer often already
    holds it. A kernel that writes nothing, skips the tail block or masks off a row passes. Fill
    outputs with NaN (a sentinel for integers) before each call, so that anything left unwritten
    fails the comparison.

    ## Example
    ```python
    actual = torch.empty((m, k), device="cuda", dtype=dtype)
    ops.moe_sum(x, actual, topk_ids, expert_map)  # expert_map holds -1 for remote experts
    torch.testing.assert_close(actual, expected)
    ```

    ## Use instead
    ```python
    actual = torch.full((m, k), float("nan"), device="cuda", dtype=dtype)
    ops.moe_sum(x, actual, topk_ids, expert_map)
    torch.testing.assert_close(actual, expected)
    ```
    """

    CODE = "KC405"
    NAME = "unpoisoned-output"
    MESSAGE = ("{name} comes from {factory}(), is written by {writer}() and compared without being poisoned, "
               "and {why}: a missed write can pass; fill it with NaN first")
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("verification/poisoned-outputs", "verification/nan-never-passes")
    VALID = [
        """
import torch
def test_norm(x, w):
    out = torch.empty_like(x)
    out.fill_(float("nan"))
    for _ in range(3):
        rms_norm(out, x, w, 1e-6)
        torch.testing.assert_close(out, ref(x, w))
""",
        """
import torch
def test_norm(x, w):
    out = torch.empty_like(x)
    rms_norm(out, x, w, 1e-6)
    torch.testing.assert_close(out, ref(x, w))
""",
    ]
    INVALID = [
        """
import torch
def test_norm(x, w):
    rms_norm_out(x, w, 1e-6)
    out = torch.empty_like(x)
    rms_norm_out(x, w, 1e-6, out=out)
    torch.testing.assert_close(out, ref(x, w))
""",
        """
import torch
def test_sum(x, ids):
    expert_map = torch.tensor([0, -1, 1, -1], device="cuda")
    out = torch.empty(x.shape[0], x.shape[-1], device=x.device)
    moe_sum(x, out, ids, expert_map)
    torch.testing.assert_close(out, ref_sum(x, ids, expert_map))
""",
    ]
    PREFILTER = (r"empty",)
    NEEDS = ("output check",)

    def leave_Module(self, original_node: cst.Module) -> None:
        for fn in Scope(self).functions():
            self._check(fn)

    def _check(self, fn: cst.FunctionDef) -> None:
        model = self.model
        if mocked(model, fn):
            return  # a dispatch test on stand-ins (monkeypatch, Mock): no kernel output to poison
        buffers: dict[str, tuple[cst.Assign, str]] = {}
        for node in nodes_under(fn.body):
            if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
                factory = self._empty(node.value)
                if factory:
                    buffers[node.targets[0].target.value] = (node, factory)
        if not buffers:
            return
        aliases = _compiled_aliases(model, fn)
        poisoned: set[str] = set()
        written: dict[str, list[tuple[cst.Call, str]]] = {}
        compared: dict[str, list[cst.Call]] = {}
        for call in calls(model, fn.body, depth=0):
            func = call.func
            if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value in buffers:
                if func.attr.value in FILLS and not _zero_fill(call):
                    poisoned.add(func.value.value)
                continue
            passed = {a.value.value for a in call.args if type(a.value) is cst.Name and a.value.value in buffers}
            if not passed:
                continue
            name = model.call_name(call) or ""
            if is_compare(model, call):
                for b in passed:
                    compared.setdefault(b, []).append(call)
            elif not name.startswith("torch.") or name.startswith("torch.ops."):
                launched = func.value if type(func) is cst.Subscript else func  # kernel[grid](...)
                shown = name or model.dotted(launched) or "a call"
                for b in passed:
                    written.setdefault(b, []).append((call, shown))
        for node in nodes_under(fn.body):  # out[...] = ... writes it too
            if type(node) is cst.Assign:
                for t in node.targets:
                    if type(t.target) is cst.Subscript and type(t.target.value) is cst.Name:
                        poisoned.add(t.target.value.value)
        evidence = _Evidence(self, fn, buffers, poisoned, written, compared, aliases)
        for b in buffers:
            if REFERENCE_BUFFER.search(b):
                continue  # the reference's own output: stale memory there fails the check, it hides nothing
            if b in written and b in compared and b not in poisoned:
                why = evidence.why(b)
                if why is None:
                    continue  # nothing in the test could have left its answer in the block: a missed write fails
                assign, factory = buffers[b]
                writer = written[b][0][1]
                self.report(assign.value, name=b, factory=factory, writer=last(writer) or writer, why=why)

    def _empty(self, value: cst.CSTNode) -> str | None:
        """``torch.empty`` (or ``.new_empty``) when ``value`` allocates without a fill."""
        if type(value) is not cst.Call:
            return None
        name = self.model.call_name(value) or ""
        if name in EMPTY_FACTORIES:
            return name
        if type(value.func) is cst.Attribute and value.func.attr.value == "new_empty":
            return ".new_empty"
        return None


def _zero_fill(call: cst.Call) -> bool:
    return bool(call.args) and type(call.args[0].value) in (cst.Integer, cst.Float) and float(
        call.args[0].value.evaluated_value) == 0.0


ZERO_FACTORIES = {"torch.zeros", "torch.zeros_like"}
# a zero tensor under such a name is scratch or metadata (written by the kernel or describing the
# layout), not data whose zeros carry into the answer
NOT_DATA = re.compile(r"cache|workspace|buf|out|lse|acc|count|indptr|loc|offset|len|table|ind|ids|idx|map|mask|"
                      r"(^|_)state$|scale|sem|flag|lock|signal|barrier|meta|ptr|slot|pos|tmp|temp|scratch",
                      re.IGNORECASE)
SIZE_PARAM = re.compile(r"^(m|n|k|bs|batch|tokens|seqlen)$|(^|_)(len|lens|length|tokens|size|count|rows|seqlen|batch)$"
                        r"|^(num|n)_", re.IGNORECASE)
LOOPS = (cst.For, cst.While)
RANDOM_DRAWS = {"randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "randperm", "normal_",
                "uniform_",
                "random_", "normal", "bernoulli", "multinomial", "exponential_", "cauchy_", "log_normal_"}
SEEDS = {"manual_seed", "seed", "set_random_seed", "seed_everything", "manual_seed_all", "set_seed"}


def _minus_one(node: cst.CSTNode) -> bool:
    return (type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus
            and type(node.expression) is cst.Integer and node.expression.evaluated_value == 1)


def _base(node: cst.CSTNode) -> str | None:
    """``out`` for ``out``, ``out[i]`` or ``out.view(...)[...]``."""
    while type(node) in (cst.Subscript, cst.Attribute, cst.Call):
        node = node.func if type(node) is cst.Call else node.value
    return node.value if type(node) is cst.Name else None


def _target(node: cst.CSTNode) -> str | None:
    """The name a one-target ``name = ...`` assigns, else None."""
    if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
        return node.targets[0].target.value
    return None


# An output that is a normaliser or a statistic of its inputs (log-sum-exp, a running max, a scale,
# a norm, mean, variance): zero or empty inputs do not make it zero (the log-sum-exp of an empty row
# is -inf, of n zero scores log(n); a scale has an epsilon floor), so zeros in memory fail for it.
STATISTIC_WORDS = {"lse", "lses", "logsumexp", "softmax_lse", "max", "amax", "absmax", "min", "amin", "scale",
                   "scales", "sf", "norm", "norms", "rstd", "std", "mean", "means", "var", "variance", "stat",
                   "stats", "denom", "expsum", "sumexp", "logz", "alpha"}


def _statistic(name: str) -> bool:
    return any(w in STATISTIC_WORDS for w in re.split(r"[_\d]+", name.lower()) if w)


def _is_zero(node: cst.CSTNode) -> bool:
    return type(node) is cst.Integer and node.evaluated_value == 0


def _compiled_aliases(model, fn: cst.FunctionDef) -> dict[str, str]:
    """``g = torch.compile(f)`` (or ``functools.partial(f, ...)``) in ``fn``: ``{"g": "f"}``, so that a
    call of ``g`` counts as the same computation as a call of ``f``."""
    out: dict[str, str] = {}
    for node in nodes_under(fn.body):
        if (type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name
                and type(node.value) is cst.Call and node.value.args
                and last(model.call_name(node.value)) in ("compile", "partial")):
            inner = model.qualname(node.value.args[0].value) or model.dotted(node.value.args[0].value)
            if inner:
                out[node.targets[0].target.value] = inner
    return out


def _negated(model, call: cst.Call) -> bool:
    """``not torch.allclose(a, b)``: the test asserts that the two differ."""
    parent = model.parent(call)
    return type(parent) is cst.UnaryOperation and type(parent.operator) is cst.Not


ZERO_REFERENCES = {"zeros", "zeros_like", "new_zeros"}


def _independently_checked(rule) -> set[str]:
    """The ops (by the key ``_op_key`` gives their calls) whose output some function of the
    module compares with an independent reference: a comparison (or a same-module helper that
    compares) with one argument built from what a call of the op wrote or returned, and another
    positional argument built from nothing that op wrote (a reference implementation's result, a
    ground-truth object, a constant). Zeros are no such reference: fresh memory holds them.

    Two unpoisoned runs of such an op compared with each other only have to catch a write one run
    misses, and do: a write both miss is a write of the op's path, which the other comparison
    catches."""
    model = rule.model
    cached = model.__dict__.get("_kc405_checked")
    if cached is not None:
        return cached
    checked: set[str] = set()
    defs = [fn for fns in model.functions.values() for fn in fns]
    validators = {id(fn) for fn in defs
                  if any(is_compare(model, c) for c in calls(model, fn.body, depth=1))}
    for fn in defs:
        aliases = _compiled_aliases(model, fn)
        own = calls(model, fn.body, depth=0)
        allocated = {_target(n) for n in nodes_under(fn.body)
                     if _target(n) and type(n.value) is cst.Call and _allocation(model, n.value)}
        allocated -= {n.func.value.value for n in nodes_under(fn.body)  # cache.uniform_(lo, hi): data, an input
                      if type(n) is cst.Call and type(n.func) is cst.Attribute
                      and type(n.func.value) is cst.Name and n.func.attr.value in FILLS - {"fill_"}}
        outputs: dict[str, set[str]] = {}  # name -> the ops that wrote or returned it
        for call in own:
            key = _op_key(model, call, aliases)
            if not key or (key.startswith("torch.") and not key.startswith("torch.ops.")):
                continue
            for a in call.args:  # the buffers the test allocated and handed to it (whole or a slice)
                base = _base(a.value)
                if base in allocated:
                    outputs.setdefault(base, set()).add(key)
            parent = model.parent(call)
            if type(parent) is cst.Assign:  # o, lse = op(...)
                for t in parent.targets:
                    for n in nodes_under(t.target):
                        if type(n) is cst.Name:
                            outputs.setdefault(n.value, set()).add(key)
        if not outputs:
            continue
        for _ in range(2):  # sorted_vals, idx = torch.sort(topk_values): built from the op's output
            for node in nodes_under(fn.body):
                if type(node) is not cst.Assign or (type(node.value) is cst.Call
                                                        and _allocation(model, node.value)):
                    continue
                came = _ops_in(outputs, node.value)
                if came:
                    for t in node.targets:
                        for n in nodes_under(t.target):
                            if type(n) is cst.Name:
                                outputs.setdefault(n.value, set()).update(came)
        for call in own:
            target = model.callee(call)
            if not (is_compare(model, call) or (target is not None and id(target) in validators)):
                continue
            args = [a for a in call.args if a.keyword is None]
            came = [_ops_in(outputs, a.value) for a in args]
            for i, ops in enumerate(came):
                checked |= {op for op in ops if any(op not in came[j] and _reference(model, args[j].value)
                                                     for j in range(len(args)) if j != i)}
    model.__dict__["_kc405_checked"] = checked
    return checked


def _op_key(model, call: cst.Call, aliases: dict[str, str]) -> str:
    """The computation a call runs, by name: ``kernel[grid](...)`` as ``kernel``, a ``torch.compile``d
    or ``functools.partial`` form (``aliases``) as the function it wraps."""
    func = call.func.value if type(call.func) is cst.Subscript else call.func
    name = model.call_name(call) or model.dotted(func) or ""
    return aliases.get(name, name)


def _ops_in(outputs: dict[str, set[str]], expr: cst.CSTNode) -> set[str]:
    """The ops whose output some name in ``expr`` holds."""
    return set().union(*(outputs.get(n.value, set()) for n in nodes_under(expr) if type(n) is cst.Name))


def _allocation(model, value: cst.Call) -> bool:
    """``torch.empty/zeros/full/ones*(...)`` or ``x.new_*(...)``: a buffer the test allocates."""
    name = last(model.call_name(value) or model.dotted(value.func))
    return name in ("empty", "empty_like", "empty_strided", "zeros", "zeros_like", "full", "full_like", "ones",
                    "ones_like", "new_empty", "new_zeros", "new_full", "new_ones")


def _reference(model, node: cst.CSTNode) -> bool:
    """An argument that can stand for an expected value: not a literal, not zeros."""
    if type(node) in (cst.Integer, cst.Float, cst.SimpleString):
        return False
    if type(node) is cst.Name and node.value in ("None", "True", "False"):
        return False
    if type(node) is cst.Call and last(model.call_name(node) or model.dotted(node.func)) in ZERO_REFERENCES:
        return False
    return True


class _Evidence:
    """What in the test could leave the compared answer in the block an unwritten buffer gets."""

    def __init__(self, rule, fn, buffers, poisoned, written, compared, aliases) -> None:
        self.rule, self.model, self.fn = rule, rule.model, fn
        self.buffers, self.poisoned, self.written, self.compared = buffers, poisoned, written, compared
        self.aliases = aliases
        self.order = {id(n): i for i, n in enumerate(nodes_under(fn.body))}
        self.own_calls = calls(self.model, fn.body, depth=0)
        self.sliced: dict[str, set[str]] = {}  # buffers written a slice at a time: ops.f(out_ref[i], ...)
        for call in self.own_calls:
            for a in call.args:
                if type(a.value) is cst.Subscript and _base(a.value) in buffers:
                    self.sliced.setdefault(_base(a.value), set()).add(self.key(call))

    def key(self, call: cst.Call) -> str:
        return _op_key(self.model, call, self.aliases)

    def why(self, b: str) -> str | None:
        if len(self.written[b]) > 1:
            # written by several calls (eager run, capture, replay): a fill at allocation guards the first only
            return None
        for reason in (self._paired, self._loop, self._warmed_up, self._sentinel, self._zero_input, self._empty_case):
            found = reason(b)
            if found:
                return found
        return None

    def _paired(self, b: str) -> str | None:
        """Compared with another unpoisoned ``torch.empty`` buffer written by the same computation:
        a write both runs miss leaves both holding what the allocator handed out (zeros in a fresh
        segment), so they agree."""
        keys = {self.key(c) for c, _ in self.written[b]}
        checked = _independently_checked(self.rule)
        if keys & checked:
            return None  # the op's output is checked against a reference elsewhere: a write both runs miss fails there
        for cmp in self.compared[b]:
            if _negated(self.model, cmp):
                continue  # assert not allclose(a, b): two unwritten buffers agree, which fails it
            for a in cmp.args:
                p = a.value.value if type(a.value) is cst.Name else None
                if not p or p == b or p not in self.buffers or p in self.poisoned:
                    continue
                if len(self.written.get(p, ())) == 1 and keys & {self.key(c) for c, _ in self.written[p]}:
                    writer = last(self.written[p][0][1]) or self.written[p][0][1]
                elif p not in self.written and self.sliced.get(p) and self.sliced[p] <= keys:
                    writer = last(min(self.sliced[p])) or min(self.sliced[p])
                else:
                    continue
                return (f"the {p} it is compared with is also an unpoisoned buffer written by {writer}(), "
                            "so a write both runs miss leaves the same stale or zeroed memory in both")
        return None

    def _loop(self, b: str) -> str | None:
        """Allocated and written in the same loop, on inputs that repeat from pass to pass (made
        outside the loop, or drawn after re-seeding with the same seed): the previous pass's buffer
        of the same size, freed when the name is rebound, held this kernel's answer. Fresh random
        inputs each pass leave another answer there, and a missed write fails."""
        assign = self.buffers[b][0]
        around = [n for n in self.model.ancestors(assign) if isinstance(n, LOOPS)]
        for loop in around:  # innermost first
            if not any(loop is n for call, _ in self.written[b] for n in self.model.ancestors(call)):
                continue
            if self._fresh_draws(loop) or self._varies(loop, b):
                return None
            shown = self.written[b][0][1]
            return (f"it is allocated and written by {last(shown) or shown}() inside a loop on repeating inputs, "
                    "where the block freed by the previous pass can hold the same answer")
        return None

    def _varies(self, loop: cst.CSTNode, b: str) -> bool:
        """The kernel's arguments follow the loop's variables (another shape, another slice each
        pass), so the previous pass computed another answer."""
        bound = {n.value for inner in nodes_under(loop) if type(inner) is cst.For
                 for n in nodes_under(inner.target) if type(n) is cst.Name}
        for _ in range(2):
            for node in nodes_under(loop.body):
                if type(node) is cst.Assign and any(
                        type(n) is cst.Name and n.value in bound for n in nodes_under(node.value)):
                    bound |= {n.value for t in node.targets for n in nodes_under(t.target) if type(n) is cst.Name}
        bound.discard(b)
        return any(type(n) is cst.Name and n.value in bound
                   for call, _ in self.written[b] for a in call.args for n in nodes_under(a.value))

    def _fresh_draws(self, loop: cst.CSTNode) -> bool:
        """The loop draws random inputs with no re-seeding by a value that stays the same each pass."""
        bound = {n.value for inner in nodes_under(loop) if type(inner) is cst.For
                 for n in nodes_under(inner.target) if type(n) is cst.Name}
        draws = reseeded = False
        for node in nodes_under(loop.body):
            if type(node) is not cst.Call:
                continue
            name = last(self.model.call_name(node) or self.model.dotted(node.func))
            if name in RANDOM_DRAWS:
                draws = True
            elif name in SEEDS and not any(type(n) is cst.Name and n.value in bound
                                           for a in node.args for n in nodes_under(a.value)):
                reseeded = True
        return draws and not reseeded

    def _warmed_up(self, b: str) -> str | None:
        """The same computation ran before the allocation and its result was dropped (a warm-up that
        returns its output, not one writing a buffer of the test's that stays alive): the block it
        wrote is free, and the allocator may hand it to this buffer."""
        at = self.order.get(id(self.buffers[b][0]), -1)
        keys = {self.key(c) for c, _ in self.written[b]}
        for call in self.own_calls:
            if self.order.get(id(call), at) >= at or self.key(call) not in keys:
                continue
            if type(self.model.parent(call)) is cst.Expr and not any(
                    _base(a.value) in self.buffers for a in call.args):
                return (f"{last(self.key(call)) or self.key(call)}() already ran before it was allocated and its "
                        "result was dropped, so the freed block can hold the answer")
        return None

    def _sentinel(self, b: str) -> str | None:
        """-1 marks entries the kernel skips (unrouted tokens, experts of another rank), whose
        expected rows are zeros, which fresh memory holds. Only tensors that reach the kernel count
        (``ids[0] = -1``, ``.masked_fill(m, -1)``, ``torch.where(m, ids, -1)``,
        ``torch.tensor([0, -1, 1])``); ``torch.full(shape, -1)`` is a poisoned buffer, not a mark.
        A data row set to 0 (``x[0] = 0``) is no evidence: what the reference makes of a zero row
        (a scale with an epsilon floor, a statistic, a quantised code) is seldom zero."""
        marked: set[str] = set()
        for node in nodes_under(self.fn.body):
            if type(node) is not cst.Assign:
                continue
            if _minus_one(node.value):
                for t in node.targets:
                    base = t.target
                    while type(base) in (cst.Subscript, cst.Attribute):
                        base = base.value
                    if type(base) is cst.Name and base is not t.target:
                        marked.add(base.value)  # ids[0] = -1
            elif (len(node.targets) == 1 and type(node.targets[0].target) is cst.Name
                  and any(self._marks(n) for n in nodes_under(node.value))):
                marked.add(node.targets[0].target.value)
        reaching = self._reaching(b)
        hit = sorted(marked & reaching)
        if hit:
            return (f"{hit[0]}, an input of the kernel, has entries set to -1 (unrouted tokens, experts "
                    "of another rank), whose expected rows are zeros that fresh memory holds")
        return None

    def _marks(self, node: cst.CSTNode) -> bool:
        if type(node) is not cst.Call:
            return False
        name = last(self.model.call_name(node) or self.model.dotted(node.func))
        if name in ("masked_fill", "masked_fill_", "where"):
            return any(_minus_one(a.value) for a in node.args[1:])
        if name == "tensor" and node.args and type(node.args[0].value) in (cst.List, cst.Tuple):
            items = [e.value for e in node.args[0].value.elements]  # an index map: whole numbers only
            return any(_minus_one(e) for e in items) and all(type(e) is cst.Integer or _minus_one(e) for e in items)
        return False

    def _reaching(self, b: str) -> set[str]:
        """Names under the arguments of ``b``'s writer calls, and the names the assignments of those
        (a ``kwargs`` dict, a tuple of inputs) are built from, two steps back."""
        names: set[str] = set()
        for call, _ in self.written[b]:
            for a in call.args:
                names |= {n.value for n in nodes_under(a.value) if type(n) is cst.Name}
        for _ in range(2):
            more: set[str] = set()
            for node in nodes_under(self.fn.body):
                if node is self.buffers.get(_target(node), (None,))[0]:
                    continue  # an output's own allocation: its shape source is no input of the kernel
                if type(node) is cst.Assign and any(type(n) is cst.Name and n.value in names
                                                        for t in node.targets for n in nodes_under(t.target)):
                    more |= {n.value for n in nodes_under(node.value) if type(n) is cst.Name}
            if more <= names:
                break
            names |= more
        return names

    def _zero_input(self, b: str) -> str | None:
        """A tensor of zeros handed to the kernel as data and to the reference as well: the answer
        is (partly) zeros, which a fresh block holds. Not for a normaliser or statistic output
        (``lse``: the log-sum-exp of n zero scores is log(n); a scale of zeros keeps its floor)."""
        if _statistic(b):
            return None  # lse = log-sum-exp of zero scores is log(n); a scale of zeros has its floor
        model = self.model
        zeros: dict[str, int] = {}
        for node in nodes_under(self.fn.body):
            if (type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name
                    and type(node.value) is cst.Call and model.call_name(node.value) in ZERO_FACTORIES
                    and not NOT_DATA.search(node.targets[0].target.value)):
                zeros[node.targets[0].target.value] = 0
        if not zeros:
            return None
        for node in nodes_under(self.fn.body):  # written later: no longer zeros
            if (type(node) is cst.Call and type(node.func) is cst.Attribute
                    and node.func.attr.value.endswith("_")):
                base = node.func.value
                while type(base) in (cst.Attribute, cst.Subscript, cst.Call):
                    base = base.func if type(base) is cst.Call else base.value
                if type(base) is cst.Name:
                    zeros.pop(base.value, None)
            elif type(node) is cst.Assign:
                for t in node.targets:
                    if type(t.target) is cst.Subscript and type(t.target.value) is cst.Name:
                        zeros.pop(t.target.value.value, None)
            elif type(node) is cst.Arg and node.keyword is not None and node.keyword.value in ("out", "output"):
                if type(node.value) is cst.Name:
                    zeros.pop(node.value.value, None)
        writers = {id(c) for c, _ in self.written[b]}
        keys = {self.key(c) for c, _ in self.written[b]}
        hit: list[str] = []
        for z in zeros:
            fed = other = False
            for call in self.own_calls:
                if not any(type(a.value) is cst.Name and a.value.value == z for a in call.args):
                    continue
                if id(call) in writers:
                    fed = True
                elif self.key(call) not in keys:
                    other = True
            if fed and other:
                hit.append(z)
        if hit:
            shown = ", ".join(hit)
            return (f"{shown} from torch.zeros() {'is an input' if len(hit) == 1 else 'are inputs'} of both the "
                    "kernel and the reference, so the expected values are (partly) zeros, which fresh memory holds")
        return None

    def _empty_case(self, b: str) -> str | None:
        """Parametrized with a size of 0 that the buffer's own shape does not name (``kv_len=0``
        with an output of ``qo_len`` rows): the expected values are zeros in that case. A buffer
        sized by that parameter (directly or through the tensor it is shaped like) is empty there,
        and an empty buffer hides nothing; a normaliser output (``lse``) of an empty row is -inf."""
        if _statistic(b):
            return None  # the log-sum-exp of an empty row is -inf, a normaliser's floor is no zero
        shape = {n.value for n in nodes_under(self.buffers[b][0].value) if type(n) is cst.Name}
        for _ in range(2):  # torch.empty_like(topk_weights), topk_weights = torch.rand(num_tokens, 8): sized by it
            for node in nodes_under(self.fn.body):
                if _target(node) in shape and node is not self.buffers[b][0]:
                    shape |= {n.value for n in nodes_under(node.value) if type(n) is cst.Name}
        for dec in self.fn.decorators:
            call = dec.decorator
            if not (type(call) is cst.Call and last(self.model.dotted(call.func)) == "parametrize"
                    and len(call.args) >= 2 and type(call.args[0].value) is cst.SimpleString):
                continue
            names = [n.strip() for n in str(call.args[0].value.evaluated_value).split(",")]
            values = self._literal(call.args[1].value)
            for v in values:
                row = [e.value for e in v.elements] if type(v) in (cst.Tuple, cst.List) and len(names) > 1 else [v]
                for name, value in zip(names, row):
                    # a size of the buffer itself makes it empty: nothing to miss
                    if SIZE_PARAM.search(name) and _is_zero(value) and name not in shape:
                        return f"it is parametrized with {name}=0, where the expected values are zeros"
        return None

    def _literal(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """The elements of a list or tuple of cases (one or two concatenated, or a module constant)."""
        if type(node) is cst.BinaryOperation and type(node.operator) is cst.Add:
            return self._literal(node.left) + self._literal(node.right)
        if type(node) in (cst.List, cst.Tuple):
            return [e.value for e in node.elements]
        if type(node) is cst.Name:
            for stmt in self.rule.context.module.body:
                if type(stmt) is cst.SimpleStatementLine:
                    for s in stmt.body:
                        target = s.targets[0].target if type(s) is cst.Assign and len(s.targets) == 1 else None
                        if type(target) is cst.Name and target.value == node.value:
                            return self._literal(s.value)
        return []
