from __future__ import annotations

import re

import libcst as cst

from kcheck.model import children, walk
from kcheck.rule import Rule
from kcheck.rules.measurement import COMPARES, Scope, is_compare, last, measures, nodes_under

SPEEDUP = re.compile(r"speed[- _]?up|\d?x faster|faster than|times faster", re.IGNORECASE)
CHECKERS = ("assert", "verify", "check", "validate", "compare", "test_")
# Words of a function's name (split at underscores) that say it checks results wherever they stand:
# ``sanity_check_outputs``, ``run_correctness_check``, ``_verify``. Not ``compare``: ``compare_backends``
# in a benchmark compares timings.
CHECK_PARTS = {"assert", "verify", "check", "checks", "validate", "correctness", "sanity"}
PRINTED_MESSAGE = ("a speed-up is reported but this file's comparison of the candidate's output is only printed, "
                   "never acted on: a microbenchmark can reject a kernel, never accept one (fail on a mismatch)")
NOT_OUTPUT_CHECKS = ("is_available", "is_cuda", "shape", "dtype", "device", "is_contiguous", "version")


class SpeedupWithoutCheck(Rule):
    """A benchmark that reports a speed-up and never checks the candidate's output.

    ## What it does
    In test and benchmark code, finds a reported speed-up (a printed, logged or stored string
    saying "speedup", "speed-up", "x faster", or a variable named `*speedup*`) in a module that
    never checks the candidate's result: no `assert_close`/`allclose`/`isclose`/`torch.equal`,
    no call to a `verify*`/`check*`/`assert*`/`compare*` function or one with `check`, `verify`,
    `validate`, `correctness` or `sanity` among the words of its name (`sanity_check_outputs`),
    and no `assert` on values (asserts on shapes, dtypes, devices and availability do not count).
    A same-module function is judged by its body, not its name (a `test_*_perf()` that only
    times is no check), and an `assert` that tests no computed value (`assert cfg is not None`,
    `assert False, "..."`, `isinstance`) is none either. Only a file that takes a time itself
    (a timed window, a host clock, a benchmark timer, or a project or library function that
    times) is judged: a summary over a harness's stored results reports speed-ups measured, and
    checked or not, elsewhere. A check whose outcome only warns still counts: it is there and runs. Comparisons that are
    only printed (`print(torch.allclose(a, b))`) decide nothing; the report then says so.

    Comparisons written by hand count too, in the code the script runs (its own `__main__` or
    argparse path and the same-module functions it reaches): an error metric of the output
    against a reference, such as `(out - ref).abs().max()`, a mean relative error, a norm of the
    difference, a cosine similarity (or DeepGEMM's `calc_diff`), counts even when it is only
    printed or stored: it measures how far the candidate is from the truth beside its speed,
    which is how a lossy (FP8, quantised) kernel is judged. An exact comparison (`(out == ref).all()`, rows whose
    index sets differ) counts when its outcome is acted on (asserted, raised on, made to exit,
    returned, or tested by an `if` that fails or warns), and gets the printed-only report when it
    is only printed.

    The finding is put where the speed-up is computed (`speedup = t_ref / t_new`, or a string
    that prints a ratio), not at a table header or an array allocated for the ratios, which only
    announce it.

    ## Why is this bad?
    A kernel bug produces fluent, plausible, wrong output at a very good latency: a kernel that
    skips work is fast. A microbenchmark can reject a kernel, never accept one, and a speed-up
    measured on a candidate that was not verified in the same script, on the same inputs, is no
    evidence at all.

    ## Example
    ```python
    t_ref = do_bench(lambda: torch_rms_norm(x, w))
    t_new = do_bench(lambda: rms_norm(x, w))
    print(f"speedup: {t_ref / t_new:.2f}x")
    ```

    ## Use instead
    ```python
    torch.testing.assert_close(rms_norm(x, w), torch_rms_norm(x.float(), w.float()).to(x.dtype),
                               atol=1e-2, rtol=1.6e-2)
    t_ref = do_bench(lambda: torch_rms_norm(x, w))
    t_new = do_bench(lambda: rms_norm(x, w))
    print(f"speedup: {t_ref / t_new:.2f}x")
    ```
    """

    CODE = "KC410"
    NAME = "speedup-without-check"
    MESSAGE = ("a speed-up is reported but nothing in this file checks the candidate's output: a microbenchmark "
               "can reject a kernel, never accept one")
    SEVERITY = "error"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("profiling/microbenchmark-rejects-never-accepts", "verification/ways-kernels-cheat-benchmarks")
    VALID = [
        """
import torch
from triton.testing import do_bench
def bench(x, w):
    torch.testing.assert_close(rms_norm(x, w), ref(x, w), atol=1e-2, rtol=1.6e-2)
    t_ref = do_bench(lambda: ref(x, w))
    t_new = do_bench(lambda: rms_norm(x, w))
    print(f"speedup: {t_ref / t_new:.2f}x")
""",
        """
def describe(a, b):
    return f"speedup {a / b:.2f}x"
""",
        """
import torch
from triton.testing import do_bench
def bench(x):
    ref = all_reduce_bf16(x).float()
    err = (all_reduce_fp8(x).float() - ref).abs()
    print(f"max abs err {err.max().item():.4f}, mean rel err {(err / ref.abs().clamp(min=1e-2)).mean().item():.4f}")
    t_ref = do_bench(lambda: all_reduce_bf16(x))
    t_new = do_bench(lambda: all_reduce_fp8(x))
    print(f"speedup: {t_ref / t_new:.2f}x")
""",
    ]
    INVALID = [
        """
import torch
from triton.testing import do_bench
def bench(x, w):
    t_ref = do_bench(lambda: ref(x, w))
    t_new = do_bench(lambda: rms_norm(x, w))
    print(f"speedup: {t_ref / t_new:.2f}x")
""",
        """
import time
def benchmark(fn, baseline, x):
    assert x.is_cuda
    speedup = timeit(baseline, x) / timeit(fn, x)
    results = {"speedup": speedup}
    return results
""",
    ]
    PREFILTER = (r"(?i)speed[- _]?up|faster",)
    NEEDS = ("timing",)

    def leave_Module(self, original_node: cst.Module) -> None:
        if not measures(self.model):
            return  # a summary over results measured elsewhere: the check belongs where they are measured
        checked = self._checks_output(original_node)
        if checked is True:
            return
        claim = self._claim(original_node)
        if claim is None:
            return
        compared = HandWritten(self.model, original_node, claim).outcome()
        if compared is True:
            return
        printed = checked == "printed" or compared == "printed"
        self.report(self._statement(claim), PRINTED_MESSAGE if printed else None)

    def _claim(self, module: cst.Module) -> cst.CSTNode | None:
        """The reported speed-up in measurement code: a string saying so (not a docstring) or an
        assignment to a ``*speedup*`` name. The first one that computes the ratio (a division in
        its statement: ``speedup = t_ref / t_new``, ``f"speedup {a / b:.2f}x"``) is where the
        speed-up is claimed; a table header or an array allocated for the ratios only announces
        it, and is the claim only where no statement computes one."""
        claims = self._claims(module)
        for claim in claims:
            if any(type(n) is cst.BinaryOperation and type(n.operator) is cst.Divide
                   for n in nodes_under(self._statement(claim))):
                return claim
        return claims[0] if claims else None

    def _claims(self, module: cst.Module) -> list[cst.CSTNode]:
        found = []
        scope = Scope(self)
        for node in nodes_under(module, nested=True):
            claim = False
            if type(node) is cst.SimpleString:
                if type(self.model.parent(node)) is cst.Expr:
                    continue  # a docstring describes, it does not report
                claim = bool(SPEEDUP.search(str(node.evaluated_value)))
            elif type(node) is cst.FormattedStringText:
                claim = bool(SPEEDUP.search(node.value))
            elif type(node) is cst.AssignTarget and type(node.target) is cst.Name:
                claim = "speedup" in node.target.value.lower()
            if claim and scope.covers(node):
                found.append(node)
        return found

    def _statement(self, node: cst.CSTNode) -> cst.CSTNode:
        for anc in self.model.ancestors(node):
            if type(anc) is cst.SimpleStatementLine:
                return anc.body[0]
        return node

    def _checks_output(self, module: cst.Module) -> bool | str:
        """True when the module checks the candidate's output: a comparison (``assert_close``,
        ``allclose``...) or a call of a function named for checking (``check*``, ``verify*``,
        ``sanity_check_outputs``) whose result is not only printed, or an ``assert`` on values.
        A check that warns counts (``if not sanity_check(...): print("WARN")``): it is there and
        runs. ``"printed"`` when the only comparisons are printed (``print(torch.allclose(a, b))``)."""
        model = self.model
        printed = False
        for n in nodes_under(module, nested=True):
            if type(n) is cst.Call:
                name = last(model.dotted(n.func)).lower()
                # a same-module function is judged by its body (walked here too), not by its name
                named = model.callee(n) is None and (name.startswith(CHECKERS) or _check_name(name))
                checks = is_compare(model, n, COMPARES) or named
                if checks and not any(type(a) is cst.Call and model.log_kind(a) for a in model.ancestors(n)):
                    return True
                printed = printed or checks  # a comparison that is only printed decides nothing
            elif type(n) is cst.Assert and not _no_value_test(n.test):
                words = {x.value for x in nodes_under(n.test) if type(x) is cst.Name}
                words |= {x.attr.value for x in nodes_under(n.test) if type(x) is cst.Attribute}
                if not any(w.startswith(NOT_OUTPUT_CHECKS) for w in words):
                    return True
        return "printed" if printed else False


def _no_value_test(test: cst.BaseExpression) -> bool:
    """An ``assert`` that tests no computed value: a literal (``assert False, "use autotune"``), a
    test against ``None`` (``assert config is not None``) or of a type or attribute."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test = test.expression
    if type(test) is cst.Name and test.value in ("True", "False", "None") or type(test) in LITERALS:
        return True
    if type(test) is cst.Comparison:
        return all(type(c.operator) in (cst.Is, cst.IsNot) and type(c.comparator) is cst.Name
                   and c.comparator.value == "None" for c in test.comparisons)
    return type(test) is cst.Call and type(test.func) is cst.Name and test.func.value in TYPE_TESTS


TYPE_TESTS = {"isinstance", "issubclass", "hasattr", "callable"}


def _check_name(name: str) -> bool:
    """A function named for checking results by one word of its name (``sanity_check_outputs``)."""
    return not CHECK_PARTS.isdisjoint(name.lower().split("_"))


# -- hand-written comparisons ----------------------------------------------------------------------

# Methods (``err.max()``) and torch functions (``torch.mean(err)``) that reduce an error tensor to a figure.
ERROR_REDUCTIONS = {"max", "amax", "mean", "sum", "norm", "median", "quantile"}
# Norms of a difference (``(out - ref).norm()``, ``torch.linalg.norm(out - ref)``) and distances.
NORMS = {"norm", "vector_norm", "matrix_norm", "dist"}
# Graded similarity or error of two tensors under library names: torch's cosine similarity, and
# DeepGEMM's ``calc_diff`` (1 - a cosine-style similarity, vendored by vLLM and SGLang).
METRIC_CALLS = {"cosine_similarity", "CosineSimilarity", "calc_diff"}
# Reductions of an element-wise equality to a verdict or a count (``(out == ref).all()``).
VERDICT_REDUCTIONS = {"all", "any", "sum", "mean", "count_nonzero", "nonzero"}
# Methods that convert or reshape a value without changing what it compares.
CASTS = {"float", "double", "half", "bfloat16", "int", "long", "to", "view", "reshape", "flatten", "contiguous",
         "cpu", "detach", "squeeze", "item", "tolist", "numpy"}
# Calls that end the run (the last part of the name): acting on a comparison.
EXITS = {"exit", "_exit", "quit", "fail", "abort"}
TENSOR_ABS = {"torch.abs", "numpy.abs", "np.abs", "torch.absolute", "numpy.absolute"}
LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


class HandWritten:
    """Comparisons of a candidate's output with a reference written out by hand, in the code the
    benchmark runs: the module's own code (its ``__main__``/argparse path included), the functions
    holding the claim, ``test*`` functions, and every same-module function or method those reach by
    name (``run_error_analysis``, a ``cosine`` helper, passed as a value or called).

    Two kinds, judged differently:

    - an error metric: a graded figure of how far the output is from the reference, such as the
      absolute or relative difference reduced to a number (``(out - ref).abs().max()``,
      ``abs_err[mask] / ref.abs()`` then ``.mean()``), a norm of the difference, a cosine
      similarity or DeepGEMM's ``calc_diff``. It counts as a check wherever it goes, printed included: it measures the
      candidate's accuracy on the same inputs next to its speed, which is how a lossy kernel (an
      FP8 collective, a quantised MoE) is judged, where no pass/fail threshold fits every input,
      and a broken kernel shows as a large error beside its speed-up.
    - an exact comparison: an element-wise ``==``/``!=`` of two computed values reduced to a verdict
      or a count (``(out == ref).all()``, ``(a != b).sum()``), or paired items of two computed
      collections compared (``sum(1 for a, b in zip(ref, got) if a != b)``, ``len(a ^ b)``). It
      counts when its outcome is acted on: asserted, raised on, made to end the run, returned, or
      tested by an ``if``/``while`` that raises, returns, exits or warns (through the names it is
      stored in). A verdict only printed decides nothing, and the report says so (``"printed"``).

    Differences of a value and its own reduction (``x - x.mean()``), and anything in a lambda (the
    timed callable), are not comparisons."""

    def __init__(self, model, module: cst.Module, claim: cst.CSTNode) -> None:
        self.model = model
        self.module = module
        self.claim = claim

    def outcome(self) -> bool | str:
        scopes = self._reached()
        exact: list[tuple[cst.CSTNode, cst.CSTNode]] = []
        for scope in scopes:
            if self._metric_in(scope, exact):
                return True
        if not exact:
            return False
        return True if self._acted(exact, scopes) else "printed"

    # -- which code runs --------------------------------------------------------------------------

    def _reached(self) -> list[cst.CSTNode]:
        """The module and the functions its code reaches by name (see the class docstring). With
        no reference to a same-module function at module level (no entry point: functions run
        from elsewhere), every function is an entry point."""
        model = self.model
        defs = [n for n in walk(self.module) if type(n) is cst.FunctionDef]
        by_name: dict[str, list[cst.FunctionDef]] = {}
        methods: dict[str, list[cst.FunctionDef]] = {}  # class name -> its methods
        for d in defs:
            by_name.setdefault(d.name.value, []).append(d)
            owner = model.parent(model.parent(d)) if model.parent(d) is not None else None
            if type(owner) is cst.ClassDef:
                methods.setdefault(owner.name.value, []).append(d)
        reached: list[cst.CSTNode] = [self.module]
        seen = {id(self.module)}

        def add(fn) -> None:
            if id(fn) not in seen:
                seen.add(id(fn))
                reached.append(fn)

        module_names = {n.value for n, _ in _own(self.module) if self._reference(n)}
        if module_names.isdisjoint(by_name) and module_names.isdisjoint(methods):
            for d in defs:
                add(d)
        for d in defs:
            if d.name.value.lower().startswith("test"):
                add(d)
        for anc in model.ancestors(self.claim):
            if type(anc) is cst.FunctionDef:
                add(anc)
        i = 0
        while i < len(reached):
            for n, _ in _own(reached[i]):
                if self._reference(n):
                    for fn in by_name.get(n.value, []) + methods.get(n.value, []):
                        add(fn)
            i += 1
        return reached

    def _reference(self, node: cst.CSTNode) -> bool:
        """A name that may refer to a function or class: not the name a ``def`` or ``class`` binds."""
        if type(node) is not cst.Name:
            return False
        parent = self.model.parent(node)
        return not (type(parent) in (cst.FunctionDef, cst.ClassDef) and parent.name is node)

    # -- error metrics and exact comparisons --------------------------------------------------------

    def _metric_in(self, scope: cst.CSTNode, exact: list) -> bool:
        """Whether ``scope`` computes an error metric; collects its exact comparisons into ``exact``
        as (node to follow, scope)."""
        diffs: set[str] = set()  # names holding a difference of two values
        errors: set[str] = set()  # names holding an error tensor (an absolute difference, or from one)
        computed: set[str] = set()  # names holding a computed value (assigned from a call's result)
        pairs: set[frozenset] = set()  # two names that iterate two computed collections side by side
        for node, in_lambda in _own(scope):
            if type(node) in (cst.Assign, cst.AnnAssign, cst.AugAssign) and node.value is not None:
                targets = _targets(node)
                if self._difference(node.value, diffs):
                    diffs |= targets
                elif self._error_tensor(node.value, diffs, errors):
                    errors |= targets
                if any(type(n) is cst.Call for n in walk(node.value)):
                    computed |= targets
            elif type(node) is cst.For:
                pairs |= self._zip_pair(node, computed)
            elif type(node) in (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp):
                loop = node.for_in  # before the element, which is written first: [a != b for a, b in ...]
                while loop is not None:
                    pairs |= self._zip_pair(loop, computed)
                    loop = loop.inner_for_in
            if in_lambda:
                continue
            if type(node) is cst.Call and self._metric(node, diffs, errors):
                return True
            if type(node) is cst.Comparison:
                follow = self._exact(node, computed, pairs)
                if follow is not None:
                    exact.append((follow, scope))
            elif (type(node) is cst.BinaryOperation and type(node.operator) is cst.BitXor
                  and _names(node.left, node.right) in pairs):
                exact.append((node, scope))  # the symmetric difference of paired sets
        return False

    def _difference(self, node: cst.CSTNode, diffs: set[str]) -> bool:
        """``out - ref`` (through casts), two values that are not literals, nor a value and its own
        reduction (``x - x.mean()``); or a name holding one."""
        node = _strip(node)
        if type(node) is cst.Name:
            return node.value in diffs
        if not (type(node) is cst.BinaryOperation and type(node.operator) is cst.Subtract):
            return False
        left, right = node.left, node.right
        if _literal(left) or _literal(right):
            return False
        a, b = _root(left), _root(right)
        return a is None or b is None or a != b

    def _error_tensor(self, expr: cst.CSTNode, diffs: set[str], errors: set[str]) -> bool:
        """An expression built on an absolute difference of tensors (``(out - ref).abs()``,
        ``torch.abs(d)``, ``abs_err[mask] / ref.abs()``) or on a name holding one."""
        for n in walk(expr, into_scopes=False):
            if type(n) is cst.Name and n.value in errors:
                return True
            if type(n) is cst.Call:
                func = n.func
                if type(func) is cst.Attribute and func.attr.value == "abs" and not n.args:
                    if self._difference(func.value, diffs):
                        return True
                elif (self.model.call_name(n) in TENSOR_ABS and n.args
                      and self._difference(n.args[0].value, diffs)):
                    return True  # not the builtin abs(): on host floats (timings) it measures no output
        return False

    def _metric(self, call: cst.Call, diffs: set[str], errors: set[str]) -> bool:
        func = call.func
        name = self.model.call_name(call) or ""
        if last(name) in METRIC_CALLS:
            return True
        if type(func) is cst.Attribute:
            method = func.attr.value
            if method in NORMS and self._difference(func.value, diffs):
                return True
            if method in ERROR_REDUCTIONS and self._error_tensor(func.value, diffs, errors):
                return True
        if not name.startswith(("torch.", "numpy.", "np.")) or not call.args:
            return False
        first = call.args[0].value
        if last(name) == "dist":
            return len(call.args) > 1 and not _literal(first) and not _literal(call.args[1].value)
        if last(name) in NORMS and self._difference(first, diffs):
            return True
        return last(name) in ERROR_REDUCTIONS and self._error_tensor(first, diffs, errors)

    def _zip_pair(self, node: cst.For | cst.CompFor, computed: set[str]) -> set[frozenset]:
        """The two loop names of ``for a, b in zip(xs, ys)`` where ``xs`` and ``ys`` are computed
        (as a one-pair set; empty when the loop is not such)."""
        it = node.iter
        target = node.target
        if not (type(it) is cst.Call and self.model.dotted(it.func) == "zip" and len(it.args) == 2
                and type(target) is cst.Tuple and len(target.elements) == 2):
            return set()
        if not all(_root(a.value) in computed for a in it.args):
            return set()
        pair = _names(*(e.value for e in target.elements))
        return {pair} if pair else set()

    def _exact(self, node: cst.Comparison, computed: set[str], pairs: set[frozenset]) -> cst.CSTNode | None:
        """The node whose use decides an exact comparison (the comparison, or the reduction of an
        element-wise one), or None when ``node`` compares no two computed values."""
        if len(node.comparisons) != 1 or type(node.comparisons[0].operator) not in (cst.Equal, cst.NotEqual):
            return None
        left, right = node.left, node.comparisons[0].comparator
        if _literal(left) or _literal(right):
            return None
        if _names(left, right) in pairs:
            return node
        a, b = _root(left), _root(right)
        if a is None or b is None or a == b or a not in computed or b not in computed:
            return None
        model = self.model
        cur: cst.CSTNode = node
        while True:  # up through casts to a reduction: (out == ref).float().mean(), torch.all(out == ref)
            parent = model.parent(cur)
            if type(parent) is cst.Attribute and parent.value is cur:
                call = model.parent(parent)
                if not (type(call) is cst.Call and call.func is parent):
                    return None
                if parent.attr.value in VERDICT_REDUCTIONS:
                    return call
                if parent.attr.value not in CASTS:
                    return None
                cur = call
            elif type(parent) is cst.Arg:
                call = model.parent(parent)
                if type(call) is cst.Call and last(model.call_name(call)) in VERDICT_REDUCTIONS:
                    return call
                return None
            else:
                return None

    # -- is a comparison acted on ----------------------------------------------------------------

    def _acted(self, exact: list, scopes: list[cst.CSTNode]) -> bool:
        """Whether some exact comparison's outcome is acted on (see the class docstring), following
        the names it is stored in and the calls of a function that returns it."""
        todo = list(exact)
        followed: set[tuple[int, str]] = set()
        while todo:
            node, scope = todo.pop()
            outcome = self._climb(node, scope)
            if outcome is True:
                return True
            if type(outcome) is cst.FunctionDef:  # returned: follow the calls of the function
                fname = outcome.name.value
                for s in scopes:
                    for n, _ in _own(s):
                        if type(n) is cst.Call and last(self.model.dotted(n.func)) == fname:
                            todo.append((n, s))
                continue
            for name in outcome or ():
                if (id(scope), name) in followed:
                    continue
                followed.add((id(scope), name))
                for n, _ in _own(scope):
                    if type(n) is cst.Name and n.value == name and not self._binds(n):
                        todo.append((n, scope))
        return False

    def _climb(self, node: cst.CSTNode, scope: cst.CSTNode):
        """Where the value of ``node`` goes: True when it is acted on, the function when it is
        returned, else the names it is stored in (possibly none: printed, or dropped)."""
        model = self.model
        child = node
        for anc in model.ancestors(node):
            if anc is scope or type(anc) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                return set()
            if type(anc) in (cst.If, cst.While):
                if anc.test is not child:
                    return set()
                return True if self._acts(anc) else _assigned(anc)
            if type(anc) in (cst.Assert, cst.Raise):
                return True
            if type(anc) is cst.Return:
                return model.enclosing_function(anc) or set()
            if type(anc) is cst.Call:
                if model.log_kind(anc):
                    return set()  # printed
                if last(model.dotted(anc.func)) in EXITS:
                    return True
            if type(anc) in (cst.Assign, cst.AnnAssign, cst.AugAssign):
                return _targets(anc) if anc.value is child else set()
            if isinstance(anc, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return set()
            child = anc
        return set()

    def _acts(self, branch: cst.If | cst.While) -> bool:
        """The ``if``/``while`` raises, returns, asserts, exits or warns in one of its branches."""
        for n in walk(branch, into_scopes=False):
            if type(n) in (cst.Raise, cst.Return, cst.Assert):
                return True
            if type(n) is cst.Call and n is not branch.test and (
                    self.model.log_kind(n) or last(self.model.dotted(n.func)) in EXITS):
                return True
        return False

    def _binds(self, name: cst.Name) -> bool:
        parent = self.model.parent(name)
        return (type(parent) is cst.AssignTarget or type(parent) is cst.Param
                or (type(parent) in (cst.AugAssign, cst.AnnAssign) and parent.target is name))


def _own(root: cst.CSTNode):
    """``(node, in_lambda)`` for the code of ``root`` (a module or function) in source order: class
    bodies are entered (they run where they stand), other functions are not."""
    stack = [(root, False)]
    while stack:
        node, in_lambda = stack.pop()
        yield node, in_lambda
        if node is not root and type(node) is cst.FunctionDef:
            continue
        inner = in_lambda or type(node) is cst.Lambda
        stack.extend((c, inner) for c in reversed(children(node)))


def _targets(stmt) -> set[str]:
    """The plain names an assignment binds (tuple targets included)."""
    roots = [t.target for t in stmt.targets] if type(stmt) is cst.Assign else [stmt.target]
    out: set[str] = set()
    for r in roots:
        for n in walk(r):
            if type(n) is cst.Name and type(r) not in (cst.Attribute, cst.Subscript):
                out.add(n.value)
    return out


def _assigned(block: cst.CSTNode) -> set[str]:
    out: set[str] = set()
    for n in walk(block, into_scopes=False):
        if type(n) in (cst.Assign, cst.AnnAssign, cst.AugAssign):
            out |= _targets(n)
    return out


def _strip(node: cst.CSTNode) -> cst.CSTNode:
    """``node`` without trailing conversions (``(a - b).float()`` -> ``a - b``)."""
    while (type(node) is cst.Call and type(node.func) is cst.Attribute
           and node.func.attr.value in CASTS):
        node = node.func.value
    return node


def _root(node: cst.CSTNode) -> str | None:
    """The leftmost name of an attribute, subscript or call chain (``out[0].float()`` -> ``out``)."""
    while True:
        if type(node) is cst.Name:
            return node.value
        if type(node) is cst.Attribute:
            node = node.value
        elif type(node) is cst.Subscript:
            node = node.value
        elif type(node) is cst.Call and type(node.func) is cst.Attribute:
            node = node.func.value
        else:
            return None


def _literal(node: cst.CSTNode) -> bool:
    if type(node) is cst.UnaryOperation:
        node = node.expression
    return isinstance(node, LITERALS) or (type(node) is cst.Name and node.value in ("None", "True", "False"))


def _names(*nodes: cst.CSTNode) -> frozenset | None:
    if all(type(n) is cst.Name for n in nodes) and len({n.value for n in nodes}) == len(nodes):
        return frozenset(n.value for n in nodes)
    return None


# -- gate -----------------------------------------------------------------------------------------


