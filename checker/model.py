"""The module model: computed once per file and shared by every rule.

Like ruff's semantic model, it answers the questions several rules ask, so no rule walks the
tree for them on its own and no rule pays for libcst's scope or qualified-name providers:

- **names**: import aliases resolved to qualified names (``import torch.nn.functional as F``,
  ``from torch import matmul as mm``) through the module's own import table;
- **structure**: each node's parent, enclosing function or class, and the same-module functions
  by name (the local call graph: a timed region that calls a helper sees the helper's body);
- **timed regions**: CUDA-event windows, callables given to ``do_bench``-style timers, host-timer
  windows, ``torch.cuda.graph`` capture blocks, and per-step hot paths (configured names);
- **kernel claims** and **launch sites**: ``@triton.jit`` functions and Triton launches, filled
  in by :mod:`kcheck.claims` for the rules that need them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator

import libcst as cst

from kcheck.config import Config
from kcheck.gate import qualify_from, resolve
from kcheck.project import BENCH_TIMERS, HOST_TIMERS, MEMOIZERS, other_backend  # noqa: F401 - the rules read them from here

# Measurement code: where an event window or a host timer measures a kernel. Elsewhere (serving
# engines timing model loading, request latency or a rebalancing step for a log line) the same
# windows are metrics, and what runs inside them is the operation being measured.
MEASUREMENT_PATH = re.compile(
    r"(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$"
    r"|(^|/)(tests?|benchmarks?|bench[^/]*|profil[^/]*|perf[^/]*|microbench[^/]*|kernel_?tests?)(/|\.py$)",
    re.IGNORECASE)
MEASUREMENT_FUNCTION = re.compile(r"^_?(test|bench|time|timeit|timing|measure|profil|perf|verify|check)", re.IGNORECASE)
SYNC_FUNCTIONS = {
    "torch.cuda.synchronize": "torch.cuda.synchronize()",
    "torch.accelerator.synchronize": "torch.accelerator.synchronize()",
    "torch.cuda.current_stream().synchronize": "stream synchronize()",
    "torch.cuda.default_stream().synchronize": "stream synchronize()",
    "torch.nonzero": "torch.nonzero() (waits for the result size)",
    "torch.unique": "torch.unique() (waits for the result size)",
    "torch.masked_select": "torch.masked_select() (waits for the result size)",
    "torch.argwhere": "torch.argwhere() (waits for the result size)",
    "torch.equal": "torch.equal() (returns a Python bool)",
    "torch.allclose": "torch.allclose() (returns a Python bool)",
    "torch.repeat_interleave": None,  # a sync only without output_size; handled below
}
SYNC_METHODS = {
    "item": ".item()",
    "cpu": ".cpu()",
    "tolist": ".tolist()",
    "numpy": ".numpy()",
    "nonzero": ".nonzero() (waits for the result size)",
}
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}
LOGGER_NAMES = {"logger", "log", "logging", "LOGGER", "_logger", "_LOGGER", "LOG"}
COMPILERS = {
    "torch.compile": "torch.compile()",
    "torch._dynamo.optimize": "torch._dynamo.optimize()",
    "triton.compile": "triton.compile()",
    "torch.utils.cpp_extension.load_inline": "load_inline()",
    "torch.utils.cpp_extension.load": "cpp_extension.load()",
}
CPU_TENSOR_FACTORIES = {"torch.tensor", "torch.as_tensor", "torch.from_numpy"}
# kernel claims whose function a task's harness times (KernelBench's ModelNew, a leaderboard entry)
HARNESS_TIMED = ("model-new", "model-solution", "custom-kernel")
# An index that is a boolean mask: indexing with one sizes the result by the count of its true
# elements, which the host must read first (a ``nonzero`` and a copy to the host). Seen at the
# subscript: a comparison, ``~m``, ``a & b``, a method or function that makes booleans, or a name
# that says it is a mask (``x[attention_mask]``, ``keys[valid_mask]``).
BOOLEAN_MAKERS = {"bool", "eq", "ne", "gt", "ge", "lt", "le", "isnan", "isinf", "isfinite", "isin",
                  "logical_not", "logical_and", "logical_or", "logical_xor"}
MASK_NAME = re.compile(r"(^|_)masks?$|^mask_", re.I)  # ``kv_mask``, ``mask_valid``; not ``masked_input`` (ids)
# Reductions whose result, used as a slice bound, is a 0-d tensor Python must read.
SLICE_READS = {"max", "min", "sum", "amax", "amin", "prod"}
# ops whose result size depends on the data: a sync when their input is on the GPU
DATA_DEPENDENT = re.compile(r"^torch\.(nonzero|argwhere|unique|masked_select|repeat_interleave|where|equal|allclose)$")


@dataclass
class TimedRegion:
    """Code whose cost lands in a measurement or in every serving step.

    ``nodes`` are the statements (or the lambda body) inside the region; ``exempt`` are nodes
    in it that belong to the measurement itself (the synchronize before a host timer's stop, or
    the ``.item()`` of the window's last statement, which ends the GPU work as well).
    """

    kind: str  # event-window | bench-callable | host-timer | graph-capture | hot-path
    label: str
    nodes: list[cst.CSTNode]
    function: cst.CSTNode | None = None
    exempt: set[int] = field(default_factory=set)  # ids of exempt nodes
    synced_before_stop: bool = True
    stop: cst.CSTNode | None = None  # the statement that ends the region (host timers)


@dataclass
class ModuleModel:
    config: Config
    path: str
    imports: dict[str, str] = field(default_factory=dict)
    parents: dict[int, cst.CSTNode] = field(default_factory=dict)
    functions: dict[str, list[cst.FunctionDef]] = field(default_factory=dict)
    classes: dict[str, cst.ClassDef] = field(default_factory=dict)
    scope_names: dict[int, str] = field(default_factory=dict)  # id(def) -> dotted name
    timed_regions: list[TimedRegion] = field(default_factory=list)
    triton_kernels: list[cst.FunctionDef] = field(default_factory=list)
    dsl_kernels: list[cst.FunctionDef] = field(default_factory=list)  # CuTe DSL, TileLang, Numba, Helion
    kernel_claims: list = field(default_factory=list)  # kcheck.claims.Claim: code presented as a kernel
    launch_sites: dict = field(default_factory=dict)  # id(call) -> kcheck.claims.Launch: kernel launches and dispatches
    calls: list[cst.Call] = field(default_factory=list)  # every call, in source order
    withs: list[cst.With] = field(default_factory=list)
    module: cst.Module | None = field(default=None, repr=False)
    _callers: dict[int, list[cst.Call]] | None = field(default=None, repr=False)
    _places: "Places | None" = field(default=None, repr=False)
    index: "NodeIndex | None" = field(default=None, repr=False)

    # -- names ---------------------------------------------------------------------------------

    def dotted(self, node: cst.CSTNode) -> str | None:
        """``a.b.c`` for a Name/Attribute chain; calls in the chain print as ``f()``."""
        if type(node) is cst.Name:
            return node.value
        if type(node) is cst.Attribute:
            base = self.dotted(node.value)
            return f"{base}.{node.attr.value}" if base else None
        if type(node) is cst.Call:
            base = self.dotted(node.func)
            return f"{base}()" if base else None
        return None

    def qualname(self, node: cst.CSTNode) -> str | None:
        """The dotted name with its first component resolved through the import table."""
        return resolve(self.dotted(node), self.imports)

    def call_name(self, call: cst.Call) -> str | None:
        return self.qualname(call.func)

    # -- structure -------------------------------------------------------------------------------

    def other_backend(self, test: cst.CSTNode) -> bool:
        """Whether an ``if``'s test holds only off CUDA GPUs (:func:`kcheck.project.other_backend`,
        read from the test's source)."""
        tree = as_ast(test)
        return tree is not None and other_backend(tree)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parents.get(id(node))
        while current is not None:
            yield current
            current = self.parents.get(id(current))

    def inside(self, node: cst.CSTNode, root: cst.CSTNode) -> bool:
        """Whether ``node`` is ``root`` or lies under it."""
        return node is root or any(a is root for a in self.ancestors(node))

    def names_of(self, value: str) -> list[cst.Name]:
        """Every ``Name`` node spelled ``value`` in the module's code (import targets, which have
        no parent, left out), from an index built on first use."""
        index = self.__dict__.get("_names_index")
        if index is None:
            index = self.__dict__["_names_index"] = {}
            for n in walk(self.module):
                if type(n) is cst.Name and id(n) in self.parents:
                    index.setdefault(n.value, []).append(n)
        return index.get(value, [])

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        for anc in self.ancestors(node):
            if type(anc) is cst.FunctionDef:
                return anc
        return None

    def context_of(self, node: cst.CSTNode) -> str:
        """The dotted name of the innermost function or class around ``node`` ("" at module level)."""
        if id(node) in self.scope_names:
            return self.scope_names[id(node)]
        for anc in self.ancestors(node):
            if id(anc) in self.scope_names:
                return self.scope_names[id(anc)]
        return ""

    def local_function(self, name: str, near: cst.CSTNode | None = None) -> cst.FunctionDef | None:
        """The module's function of that name; with ``near``, one defined in a function around
        ``near`` first (two benchmarks' ``def fwd():`` closures are two functions)."""
        defs = self.functions.get(name)
        if not defs:
            return None
        if near is not None and len(defs) > 1:
            around = [a for a in self.ancestors(near) if type(a) is cst.FunctionDef]
            for fn in around:
                inner = [d for d in defs if self.enclosing_function(d) is fn]
                if inner:
                    return inner[-1]
            top = [d for d in defs if self.enclosing_function(d) is None]
            if top:
                return top[-1]
        return defs[-1]

    def in_measurement_code(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is in benchmark or test code: by its file's path, or by the name of a
        function around it (``bench_*``, ``test_*``, ``time_*``, ``measure*``, ``profile*``)."""
        if MEASUREMENT_PATH.search(self.path):
            return True
        chain = [node] if type(node) is cst.FunctionDef else []
        chain += [a for a in self.ancestors(node) if type(a) is cst.FunctionDef]
        return any(MEASUREMENT_FUNCTION.match(f.name.value) for f in chain)

    def callee(self, call: cst.Call) -> cst.FunctionDef | None:
        """The same-module function a call reaches: ``helper(...)`` or ``self.helper(...)``."""
        func = call.func
        if type(func) is cst.Name and func.value not in self.imports:
            return self.local_function(func.value, call)
        if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value in ("self", "cls"):
            # the method of the caller's own class or of its same-module bases (two classes of a
            # module often define the same helper name); one inherited from elsewhere is unseen
            owner = next((a for a in self.ancestors(call) if type(a) is cst.ClassDef), None)
            if owner is None:
                return self.local_function(func.attr.value)
            stack, seen = [owner], set()
            while stack:
                cls = stack.pop()
                if id(cls) in seen or type(cls.body) is not cst.IndentedBlock:
                    continue
                seen.add(id(cls))
                for stmt in cls.body.body:
                    if type(stmt) is cst.FunctionDef and stmt.name.value == func.attr.value:
                        return stmt
                for base in cls.bases:
                    found = self.classes.get((self.dotted(base.value) or "").split(".")[-1])
                    if found is not None:
                        stack.append(found)
            return None
        return None

    def callers(self, fn: cst.FunctionDef) -> list[cst.Call]:
        """Every call in the module that reaches ``fn`` (as ``callee`` resolves it), in source order."""
        if self._callers is None:
            self._callers = {}
            for call in self.calls:
                target = self.callee(call)
                if target is not None:
                    self._callers.setdefault(id(target), []).append(call)
        return self._callers.get(id(fn), [])

    def calls_in(self, nodes: list[cst.CSTNode], depth: int = 3,
                 follow: Callable[[cst.Call], bool] | None = None) -> Iterator[tuple[cst.Call, cst.Call | None]]:
        """Every call under ``nodes``, and in the same-module helpers they call (to ``depth``).

        Yields ``(call, via)``: ``via`` is the call site inside ``nodes`` that led into a helper,
        or None for a call written directly in the region. Nested function and class bodies
        are not entered (they do not run where they are defined), nor is a helper whose call
        site ``follow`` rejects (at any depth: a call under ``if debug:`` two helpers down).
        """
        return _calls_in(self, nodes, None, depth, follow, set())

    @property
    def places(self) -> "Places":
        """Where each expression's tensor lives (:mod:`kcheck.values`), computed as asked."""
        if self._places is None:
            self._places = Places(self)
        return self._places

    # -- classification ---------------------------------------------------------------------------

    def sync_kind(self, call: cst.Call, function: cst.CSTNode | None = None) -> str | None:
        """What host sync a call is, or None: a call that waits for the GPU, unless what it reads is
        on the host (:mod:`kcheck.values`). ``function`` is kept for callers; places know their scope."""
        name = self.call_name(call)
        if name in SYNC_FUNCTIONS:
            if name == "torch.repeat_interleave":
                repeats = next((a.value for a in call.args if a.keyword and a.keyword.value == "repeats"),
                               call.args[1].value if len(call.args) > 1 and not call.args[1].keyword else None)
                if any(a.keyword and a.keyword.value == "output_size" for a in call.args) or (
                        repeats is not None and self._on_host(repeats)):
                    return None  # the output's size is known on the host: input size times an int
                what = "torch.repeat_interleave() without output_size"
            else:
                what = SYNC_FUNCTIONS[name]
            if DATA_DEPENDENT.match(name) and call.args and (self._on_host(call.args[0].value) or bound_to_host(self, call)):
                return None  # torch.nonzero(mask_cpu): the result size is known on the host
            return what
        if name == "torch.where" and len([a for a in call.args if not a.keyword]) == 1:
            if self._on_host(call.args[0].value) or bound_to_host(self, call):
                return None
            return "one-argument torch.where() (waits for the result size)"
        launch = self.launch_sites.get(id(call))
        if launch is not None and launch.host_sync:
            return f"{launch.host_sync} in the extension's {launch.name.split('.')[-1]}()"
        func = call.func
        if type(func) is cst.Name and func.value in ("synchronize", "device_synchronize", "cuda_synchronize"):
            return "synchronize()"  # a timing helper's injected ``synchronize`` callable, or a local wrapper
        if type(func) is cst.Attribute:
            method = func.attr.value
            if method == "synchronize" and name and not name.startswith("torch.cuda.synchronize"):
                return "synchronize()"
            if method in SYNC_METHODS:
                if call.args and method in ("cpu", "numpy", "item", "tolist"):
                    return None  # not the tensor method (e.g. a custom API)
                if self._on_host(func.value) or method == "nonzero" and bound_to_host(self, call):
                    return None
                return SYNC_METHODS[method]
            if method == "to" and call.args and _is_str(call.args[0].value, "cpu"):
                if self._on_host(func.value):
                    return None
                return ".to('cpu')"
        return reading_sync(self, call)

    def subscript_sync(self, node: cst.Subscript) -> str | None:
        """What host sync reading ``x[mask]`` is, or None: a boolean mask (:data:`BOOLEAN_MAKERS`,
        :data:`MASK_NAME`) among the indices of a read, unless the mask or the tensor is on the host.
        A store (``x[mask] = 0``) is a ``masked_fill`` and waits for nothing."""
        if type(self.parent(node)) in (cst.AssignTarget, cst.AugAssign, cst.Del) or any(
                type(a) is cst.AssignTarget for a in self.ancestors(node)):
            return None
        for element in node.slice:
            index = element.slice
            if type(index) is cst.Slice:
                for bound in (index.lower, index.upper, index.step):
                    if bound is not None and tensor_read(bound) and self.places.place(bound) in ON_GPU:
                        return "slicing up to a GPU tensor's value (Python waits to read it)"
                continue
            if type(index) is not cst.Index or not boolean_mask(index.value):
                continue
            if self._on_host(index.value) or self._on_host(node.value):
                return None
            return "indexing with a boolean mask (waits for the count of its true elements)"
        return None

    def test_sync(self, test: cst.CSTNode) -> str | None:
        """What host sync a branch's test is, or None: Python takes the truth value of a comparison
        of a GPU tensor's element (``if lens[i] > 0:``, ``assert self.pos[0] + n <= size``; each
        operand of an ``and``/``or``/``not``; the form is :func:`tested_read_ast`'s). The reductions
        and builtins a test calls are ``sync_kind``'s."""
        for operand in tested_operands(test):
            if type(operand) is cst.Comparison and self.places.place(operand) in ON_GPU \
                    and (tree := as_ast(operand)) is not None and tested_read_ast(tree):
                return "a branch on a GPU tensor's value (Python waits to read it)"
        return None

    def module_names(self) -> set[str]:
        """Names bound at module level (imports and assignments): where a constant such as
        ``SUPPORTED_HEAD_SIZES`` or a cache such as ``_KERNELS = {}`` lives."""
        found = self.__dict__.get("_module_names")
        if found is None:
            found = self.__dict__["_module_names"] = set(self.imports)
            for stmt in self.module.body if self.module is not None else ():
                for small in stmt.body if type(stmt) is cst.SimpleStatementLine else ():
                    targets = [t.target for t in small.targets] if type(small) is cst.Assign else (
                        [small.target] if type(small) is cst.AnnAssign else [])
                    found.update(n.value for t in targets for n in walk(t) if type(n) is cst.Name)
        return found

    def _on_host(self, node: cst.CSTNode) -> bool:
        return self.places.place(node) == HOST

    def is_cpu_factory(self, call: cst.Call) -> bool:
        name = self.call_name(call)
        device = next((a.value for a in call.args if a.keyword and a.keyword.value == "device"), None)
        if device is not None:
            return _is_str(device, "cpu") or (
                type(device) is cst.Call and self.call_name(device) == "torch.device" and device.args
                and _is_str(device.args[0].value, "cpu")
            )
        if name in CPU_TENSOR_FACTORIES:
            return True
        func = call.func
        return type(func) is cst.Attribute and func.attr.value in ("cpu", "numpy")

    def log_kind(self, call: cst.Call) -> str | None:
        """``print()`` or a logging call, or None. Device-side prints (tl.device_print) are not."""
        func = call.func
        if type(func) is cst.Name and func.value == "print" and "print" not in self.functions:
            return "print()"
        name = self.call_name(call) or ""
        if name in ("warnings.warn", "tqdm.write", "pprint.pprint"):
            return f"{name}()"
        if type(func) is cst.Attribute and func.attr.value in LOG_METHODS:
            base = self.dotted(func.value) or ""
            head = base.split(".")[-1]
            if head in LOGGER_NAMES or base.startswith("logging") or self.qualname(func.value) == "logging":
                return f"{base}.{func.attr.value}()"
        return None

    def compile_kind(self, call: cst.Call) -> str | None:
        return COMPILERS.get(self.call_name(call) or "")


def _is_str(node: cst.CSTNode, value: str) -> bool:
    return type(node) is cst.SimpleString and node.evaluated_value == value


# libcst's ``node.children`` rebuilds the node through a visitor on every access, which made
# child iteration the single largest cost of a scan. ``children`` reads the dataclass fields
# directly instead, skipping the whitespace and punctuation fields that never hold code.
_SKIP_FIELDS = {
    "lpar", "rpar", "comma", "semicolon", "colon", "equal", "dot", "star", "whitespace_before",
    "whitespace_after", "leading_lines", "lines_after_decorators", "header", "footer", "newline",
    "trailing_whitespace", "default_indent", "default_newline", "encoding", "operator",
}
_FIELDS: dict[type, tuple[str, ...]] = {}
# where the dataclass field order is not the source order
_SOURCE_ORDER: dict[type, tuple[str, ...]] = {
    cst.FunctionDef: ("decorators", "name", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "bases", "keywords", "body"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.IfExp: ("body", "test", "orelse"),
}


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The child nodes of ``node`` that can hold code, in source order (fast)."""
    names = _FIELDS.get(type(node))
    if names is None:
        import dataclasses

        names = _SOURCE_ORDER.get(type(node)) or tuple(
            f.name for f in dataclasses.fields(node)
            if f.name not in _SKIP_FIELDS and not f.name.startswith("whitespace"))
        _FIELDS[type(node)] = names
    out: list[cst.CSTNode] = []
    for name in names:
        value = getattr(node, name)
        kind = type(value)
        if kind in _NODE_TYPES:
            out.append(value)
        elif kind is list or kind is tuple:
            out.extend(v for v in value if type(v) in _NODE_TYPES)
    return out


def _all_node_types() -> frozenset[type]:
    """Every concrete libcst node class (a set lookup is far cheaper than an ABC isinstance)."""
    seen: set[type] = set()
    todo = [cst.CSTNode]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return frozenset(seen)


_NODE_TYPES = _all_node_types()


SCOPES = (cst.FunctionDef, cst.ClassDef)
SCOPES_AND_LAMBDAS = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def walk(root: cst.CSTNode, into_scopes: bool = True) -> Iterator[cst.CSTNode]:
    """``root`` and every node under it, depth-first in source order. With ``into_scopes=False``
    nested function and class bodies are not entered (they do not run where they are defined)."""
    return subtree(root, () if into_scopes else SCOPES)


class NodeIndex:
    """Every node of one module in source (pre-)order, and for each the index just past its last
    descendant. Rules walk the same subtrees many times over; with the index a walk is a run over
    one list instead of a new traversal that asks every node for its children."""

    __slots__ = ("order", "end", "at")

    def __init__(self, order: list[cst.CSTNode], up: list[int]) -> None:
        size = [1] * len(order)
        for j in range(len(order) - 1, 0, -1):
            size[up[j]] += size[j]
        self.order = order
        self.end = [i + n for i, n in enumerate(size)]
        self.at = {id(n): i for i, n in enumerate(order)}

    def under(self, i: int, skip: tuple[type, ...]) -> Iterator[cst.CSTNode]:
        order, end = self.order, self.end
        stop = end[i]
        if not skip:
            yield from order[i:stop]
            return
        yield order[i]
        j = i + 1
        while j < stop:
            node = order[j]
            yield node
            j = end[j] if type(node) in skip else j + 1


_INDEX: NodeIndex | None = None  # the module being checked (set by ``build_model``, cleared by ``release``)


def release() -> None:
    """Forget the checked module's node index, which holds every node of its tree: once a file is
    done, refcounting then frees the tree at once instead of keeping it until the next file."""
    global _INDEX
    _INDEX = None


def subtree(root: cst.CSTNode, skip: tuple[type, ...] = ()) -> Iterator[cst.CSTNode]:
    """``root`` and every node under it in source order, not entering nodes whose type is in
    ``skip`` (below ``root``). Served from the checked module's ``NodeIndex``; a node from any other
    tree is traversed."""
    index = _INDEX
    if index is not None:
        i = index.at.get(id(root))
        if i is not None and index.order[i] is root:  # the index holds its nodes: ids are not reused
            return index.under(i, skip)
    return _traverse(root, skip)


def _traverse(root: cst.CSTNode, skip: tuple[type, ...]) -> Iterator[cst.CSTNode]:
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if node is not root and type(node) in skip:
            continue
        stack.extend(reversed(children(node)))


def _decorator_names(fn: cst.FunctionDef) -> Iterator[str]:
    """The last component of each decorator's name (``functools.lru_cache(...)`` -> ``lru_cache``)."""
    for dec in fn.decorators:
        target = dec.decorator.func if type(dec.decorator) is cst.Call else dec.decorator
        yield target.attr.value if type(target) is cst.Attribute else getattr(target, "value", "")


def _memoized(fn: cst.FunctionDef) -> bool:
    """``@functools.lru_cache``/``@cache``: the body runs once per argument set, not on every call."""
    return any(name in MEMOIZERS for name in _decorator_names(fn))


def _generator(fn: cst.FunctionDef) -> bool:
    """A generator function: calling it only creates the generator, and its body runs later, where
    the generator is iterated (a ``@contextmanager`` function's body does run at ``with``)."""
    if any("contextmanager" in name for name in _decorator_names(fn)):
        return False
    return fn.asynchronous is None and any(type(n) is cst.Yield for n in walk(fn.body, into_scopes=False))


TESTS = (cst.If, cst.While, cst.Assert, cst.IfExp)


def tested_operands(test: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The values whose truth a test takes: the test, or each operand of its ``and``/``or``/``not``."""
    kind = type(test)
    if kind is cst.BooleanOperation:
        yield from tested_operands(test.left)
        yield from tested_operands(test.right)
    elif kind is cst.UnaryOperation and type(test.operator) is cst.Not:
        yield from tested_operands(test.expression)
    else:
        yield test


def as_ast(expr: cst.CSTNode) -> ast.expr | None:
    """An expression's ``ast`` form, read from its source: the facts over ``ast`` are the one
    definition of a question, and a rule asks them of its libcst nodes through this."""
    try:
        return ast.parse("(" + cst.Module([]).code_for_node(expr) + ")", mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None


def boolean_mask(expr: cst.CSTNode) -> bool:
    """Whether an index expression is a boolean mask by its form (:func:`boolean_mask_ast`)."""
    tree = as_ast(expr)
    return tree is not None and boolean_mask_ast(tree)


def tensor_read(expr: cst.CSTNode) -> bool:
    """A slice bound that reads a tensor (:func:`tensor_read_ast`)."""
    tree = as_ast(expr)
    return tree is not None and tensor_read_ast(tree)


def waiting_read(node: cst.Subscript) -> bool:
    """A subscript that may wait for the GPU by its form: a boolean mask among its indices, or a
    slice bounded by a tensor's element or reduction (:meth:`ModuleModel.subscript_sync` decides)."""
    tree = as_ast(node)
    return tree is not None and waiting_read_ast(tree)


# What a subscript reads, over the ``ast``: the one definition, which the facts that decide which
# files need the model read directly and the rules through :func:`as_ast`.

def boolean_mask_ast(expr: ast.AST) -> bool:
    """Whether an index expression is a boolean mask by its form (see :data:`BOOLEAN_MAKERS`)."""
    kind = type(expr)
    if kind is ast.Compare:
        return not any(type(o) in (ast.In, ast.NotIn, ast.Is, ast.IsNot) for o in expr.ops)
    if kind is ast.UnaryOp:
        return type(expr.op) is ast.Invert
    if kind is ast.BinOp and type(expr.op) in (ast.BitAnd, ast.BitOr, ast.BitXor):
        return boolean_mask_ast(expr.left) or boolean_mask_ast(expr.right)
    if kind is ast.Call:
        func = expr.func
        return (func.attr if type(func) is ast.Attribute else func.id if type(func) is ast.Name else "") in BOOLEAN_MAKERS
    if kind is ast.Name:
        return bool(MASK_NAME.search(expr.id))
    return kind is ast.Attribute and bool(MASK_NAME.search(expr.attr))


def tensor_read_ast(expr: ast.AST | None) -> bool:
    """Whether a slice bound reads an element or a reduction of a tensor by its form: ``lens[i]``,
    ``cu_seqlens[-1]``, ``lens.max()``, ``(a - b).sum()`` (the values model says where it lives)."""
    return type(expr) is ast.Subscript or type(expr) is ast.Call and type(expr.func) is ast.Attribute \
        and expr.func.attr in SLICE_READS


def tested_read_ast(test: ast.AST) -> bool:
    """Whether a branch's test may take a tensor element's truth value by its form: one of its
    ``and``/``or``/``not`` operands compares (not ``is``/``in``) an element read (``lens[i] > 0``,
    ``self.pos[0] + n <= size``): :meth:`ModuleModel.test_sync` decides with the values model."""
    kind = type(test)
    if kind is ast.BoolOp:
        return any(tested_read_ast(v) for v in test.values)
    if kind is ast.UnaryOp and type(test.op) is ast.Not:
        return tested_read_ast(test.operand)
    return kind is ast.Compare and not any(type(o) in (ast.Is, ast.IsNot, ast.In, ast.NotIn) for o in test.ops) \
        and any(_element_read_ast(e) for e in (test.left, *test.comparators))


def _element_read_ast(expr: ast.AST) -> bool:
    kind = type(expr)
    if kind is ast.BinOp:
        return _element_read_ast(expr.left) or _element_read_ast(expr.right)
    if kind is ast.UnaryOp:
        return _element_read_ast(expr.operand)
    return kind is ast.Subscript and type(expr.slice) is not ast.Slice


def waiting_read_ast(node: ast.AST) -> bool:
    return type(node) is ast.Subscript and type(node.ctx) is ast.Load and any(
        boolean_mask_ast(e) or type(e) is ast.Slice and any(tensor_read_ast(b) for b in (e.lower, e.upper, e.step))
        for e in (node.slice.elts if type(node.slice) is ast.Tuple else [node.slice]))


def _calls_in(model: "ModuleModel", roots, via, depth: int, follow, seen: set[int]):
    """``ModuleModel.calls_in``'s walk, ``depth`` more helpers down (a module-level function: a
    nested one that calls itself is a reference cycle, which keeps the model alive until the
    cycle collector runs)."""
    for root in roots:
        for call in _calls_under(root):
            yield call, via
            target = model.callee(call)
            if (target is not None and depth > 0 and id(target) not in seen and not _memoized(target)
                    and not _generator(target) and (follow is None or follow(call))):
                seen.add(id(target))
                yield from _calls_in(model, [target.body], via or call, depth - 1, follow, seen)


def _calls_under(root: cst.CSTNode) -> Iterator[cst.Call]:
    return (n for n in walk(root, into_scopes=False) if type(n) is cst.Call)


# -- building the model ------------------------------------------------------------------------


def _record_import(model: ModuleModel, node: cst.Import | cst.ImportFrom) -> None:
    if type(node) is cst.Import:
        for alias in node.names:
            full = model.dotted(alias.name) or ""
            if alias.asname is not None and type(alias.asname.name) is cst.Name:
                model.imports[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                model.imports[head] = head
        return
    if type(node.names) is cst.ImportStar:
        return
    module = "." * len(node.relative) + ((model.dotted(node.module) or "") if node.module else "")
    for alias in node.names:
        name = model.dotted(alias.name) or ""
        local = alias.asname.name.value if alias.asname and type(alias.asname.name) is cst.Name else name
        model.imports[local] = qualify_from(module, name)


def build_model(module: cst.Module, config: Config, path: str) -> ModuleModel:
    """One pass over the tree (parents, imports, scopes, CPU-known names), then the regions and claims."""
    global _INDEX
    model = ModuleModel(config=config, path=path, module=module)
    parents = model.parents
    order: list[cst.CSTNode] = []  # every node, pre-order
    up: list[int] = []  # the index of each node's parent in ``order``
    # (node, dotted scope, enclosing function, parent's index, whether to record its parent)
    stack: list[tuple[cst.CSTNode, str, cst.FunctionDef | None, int, bool]] = [(module, "", None, 0, True)]
    # ``type(node) is`` rather than ``isinstance``: libcst nodes are ABCs, whose isinstance is slow,
    # and every class tested here is concrete (no subclasses)
    Import, ImportFrom, ClassDef, FunctionDef, Call, With = (
        cst.Import, cst.ImportFrom, cst.ClassDef, cst.FunctionDef, cst.Call, cst.With)
    while stack:
        node, scope, function, parent_at, linked = stack.pop()
        at = len(order)
        order.append(node)
        up.append(parent_at)
        kind = type(node)
        if kind is Import or kind is ImportFrom:
            _record_import(model, node)
            linked = False  # the names inside an import are not code: no parents, as before
        elif kind is ClassDef:
            scope = f"{scope}.{node.name.value}" if scope else node.name.value
            model.classes[node.name.value] = node
            model.scope_names[id(node)] = scope
        elif kind is FunctionDef:
            scope = f"{scope}.{node.name.value}" if scope else node.name.value
            model.scope_names[id(node)] = scope
            model.functions.setdefault(node.name.value, []).append(node)
            function = node
        elif kind is Call:
            model.calls.append(node)
        elif kind is With:
            model.withs.append(node)
        kids = children(node)
        if linked:
            for child in kids:
                parents[id(child)] = node
        stack.extend([(child, scope, function, at, linked) for child in reversed(kids)])
    model.index = _INDEX = NodeIndex(order, up)
    _find_timed_regions(model, module)
    from kcheck.claims import find_claims

    find_claims(model, module)
    hot = {id(r.function) for r in model.timed_regions if r.kind == "hot-path"}
    for claim in model.kernel_claims:
        if claim.kind == "custom-op" and id(claim.function) not in hot:
            # a registered op's implementation runs on every call of the op
            model.timed_regions.append(TimedRegion(
                "hot-path", f"the implementation of {claim.label} (it runs on every call of the op)",
                [claim.function.body], claim.function))
        elif claim.kind in HARNESS_TIMED:
            # a solution's forward (or a leaderboard's custom_kernel) is what the task's harness
            # times: a measurement, not a serving step (KC201, not KC203)
            model.timed_regions = [r for r in model.timed_regions
                                   if not (r.kind == "hot-path" and r.function is claim.function)]
            model.timed_regions.append(TimedRegion(
                "bench-callable", f"{claim.label}, which the task's benchmark harness times",
                [claim.function.body], claim.function))
    return model


# -- timed regions -----------------------------------------------------------------------------


def _statement_calls(stmt: cst.CSTNode) -> Iterator[cst.Call]:
    if type(stmt) in (cst.FunctionDef, cst.ClassDef):
        return iter(())
    return _calls_under(stmt)


# A host-timer window this long times a job (a conversion's layer, an eval), whose time feeds a
# progress line or an ETA, not a kernel: a benchmark's window is a few statements around a call.
JOB_STATEMENTS = 60


def _times_a_job(model: ModuleModel, inner: list[cst.CSTNode]) -> bool:
    """A window over more than ``JOB_STATEMENTS`` statements, or one around other measurements (a
    project function which itself times, the project index's ``Config.measuring``; a ``do_bench``;
    a window of its own, two host timers or two event records), times a job, not GPU work."""
    count = clocks = records = 0
    timing = set(model.config.measuring)
    for stmt in inner:
        for node in walk(stmt):
            if type(node) is cst.SimpleStatementLine:
                count += 1
                if count > JOB_STATEMENTS:
                    return True
            elif type(node) is cst.Call:
                if timing and model.dotted(node.func) in timing or is_bench_timer(model, node):
                    return True
                clocks += is_host_timer(model, node)
                records += _is_record(model, node)
                if clocks >= 2 or records >= 2:
                    return True
    return False


def _is_record(model: ModuleModel, call: cst.Call) -> bool:
    func = call.func
    return type(func) is cst.Attribute and func.attr.value == "record" and len(call.args) <= 1 and not (
        (model.qualname(func) or "").startswith("torch.cuda.memory")
    )


def is_host_timer(model: ModuleModel, call: cst.Call) -> bool:
    """``time.perf_counter()``, ``time.time()`` and the other host clocks (``HOST_TIMERS``)."""
    return (model.call_name(call) or "") in HOST_TIMERS


def is_bench_timer(model: ModuleModel, call: cst.Call) -> bool:
    """``triton.testing.do_bench`` and the other timers handed a callable (``BENCH_TIMERS``)."""
    return (model.call_name(call) or "").split(".")[-1] in BENCH_TIMERS


def _statements_holding(model: ModuleModel, node: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, int]]:
    """(block, index) of every statement that contains ``node``, innermost first, up to the
    enclosing function or class (a ``def`` statement does not run the code in its body)."""
    child = node
    for anc in model.ancestors(node):
        if type(anc) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return
        if type(anc) in (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite):
            body = anc.body
            for i, stmt in enumerate(body):
                if stmt is child:
                    yield anc, i
                    break
        child = anc


def _pairs_by_name(model: ModuleModel, stmts: list, ordered: list[int]) -> list[tuple[int, int]]:
    """Windows paired by what the timers bind: ``t0 = perf_counter()`` opens one, the next
    statement that reads ``t0`` (``elapsed = perf_counter() - t0``) closes it. For an odd count of
    timer statements in a block, where one statement holds a window of its own (a loop with both
    timers) and pairing in order would run a window across it."""
    pairs: list[tuple[int, int]] = []
    opened: tuple[int, set[str]] | None = None
    for i in ordered:
        stmt = stmts[i]
        if opened is not None and any(type(n) is cst.Name and n.value in opened[1] for n in walk(stmt)):
            pairs.append((opened[0], i))
            opened = None
            continue
        body = stmt.body if type(stmt) is cst.SimpleStatementLine else ()
        names = {n.value for a in body if type(a) is cst.Assign and type(a.value) is cst.Call
                 and is_host_timer(model, a.value) for t in a.targets for n in walk(t.target) if type(n) is cst.Name}
        opened = (i, names) if names else None
    return pairs


def _pairs_by_difference(model: ModuleModel, stmts: list, ordered: list[int]) -> list[tuple[int, int]]:
    """Windows paired by the differences the block takes of its timers' names: ``t1 = time.time()``,
    ``qt2 = time.time()``, ``t2 = time.time()`` and later ``qt2 - t1`` and ``t2 - qt2`` are two
    windows, (t1, qt2) and (qt2, t2), whatever the timers' order says; each name as bound when the
    difference is taken. Empty when the block takes no such difference."""
    timers = set(ordered)
    bound: dict[str, int] = {}
    pairs: set[tuple[int, int]] = set()
    for i, stmt in enumerate(stmts):
        for n in walk(stmt):
            if type(n) is cst.BinaryOperation and type(n.operator) is cst.Subtract and type(n.left) is cst.Name \
                    and type(n.right) is cst.Name and n.left.value in bound and n.right.value in bound \
                    and bound[n.right.value] < bound[n.left.value]:
                pairs.add((bound[n.right.value], bound[n.left.value]))
        if i in timers and type(stmt) is cst.SimpleStatementLine:
            for a in stmt.body:
                if type(a) is cst.Assign and type(a.value) is cst.Call and is_host_timer(model, a.value):
                    bound.update((t.target.value, i) for t in a.targets if type(t.target) is cst.Name)
    return sorted(pairs)


def _find_timed_regions(model: ModuleModel, module: cst.Module) -> None:
    config = model.config
    records: dict[int, dict[int, int]] = {}  # block -> statement index -> record calls it holds
    timers: dict[int, dict[int, int]] = {}  # block -> statement index -> timer calls it holds
    blocks: dict[int, cst.CSTNode] = {}
    for call in model.calls:
        if _is_record(model, call):
            for block, index in _statements_holding(model, call):
                blocks[id(block)] = block
                counts = records.setdefault(id(block), {})
                counts[index] = counts.get(index, 0) + 1
        elif is_host_timer(model, call):
            for block, index in _statements_holding(model, call):
                blocks[id(block)] = block
                counts = timers.setdefault(id(block), {})
                counts[index] = counts.get(index, 0) + 1
        else:
            name = model.call_name(call) or ""
            if is_bench_timer(model, call):
                target = _bench_target(model, call)
                if target is not None:
                    model.timed_regions.append(TimedRegion(
                        "bench-callable", f"the callable timed by {name.split('.')[-1]}()",
                        [target], model.enclosing_function(call)))
    for key, indices in records.items():
        # records pair up in order (start, end), (start, end), ...: a sync between two windows is
        # outside both. A statement holding a whole window (a loop with both records) is its own
        # window, found in its own block, and takes no part in the pairing here.
        ordered = sorted(i for i, n in indices.items() if n % 2)
        for first, last in zip(ordered[::2], ordered[1::2]):
            if last - first > 1 and model.in_measurement_code(blocks[key]):
                block = blocks[key]
                model.timed_regions.append(TimedRegion(
                    "event-window", "a CUDA-event window (start.record() ... end.record())",
                    list(block.body[first + 1:last]), model.enclosing_function(block)))
    for key, indices in timers.items():
        # timers pair up as the block's differences of their names say (``_pairs_by_difference``),
        # else in order (start, stop), (start, stop), ...: a sync or a print between two
        # windows is outside both; an odd count (a lap timer) keeps one window over all of them.
        # A statement holding a whole window (an ``if`` or loop with both timers) is its own
        # window, found in its own block, and takes no part in the pairing here.
        ordered = sorted(i for i, n in indices.items() if n % 2)
        if not ordered:
            continue
        pairs = _pairs_by_difference(model, list(blocks[key].body), ordered) or (
            list(zip(ordered[::2], ordered[1::2])) if len(ordered) % 2 == 0 else
            _pairs_by_name(model, list(blocks[key].body), ordered) or [(ordered[0], ordered[-1])])
        for start, stop in pairs:
            if stop - start <= 1 or not model.in_measurement_code(blocks[key]) or _times_a_job(
                    model, list(blocks[key].body)[start + 1:stop]):
                continue
            block = blocks[key]
            stmts = list(block.body)
            function = model.enclosing_function(block)
            inner = stmts[start + 1:stop]
            exempt: set[int] = set()
            j = len(inner) - 1
            # ``torch.cuda.synchronize(); print(len(out))`` before the stop: the sync still ends the work
            k = _last_work(model, inner)
            if k >= 0 and _is_sync_statement(model, inner[k], function):
                j = k
            while j >= 0 and _is_sync_statement(model, inner[j], function):
                exempt.add(id(inner[j]))
                j -= 1
            if not exempt and inner and type(inner[-1]) is cst.SimpleStatementLine:
                # ``y = fn(x).item()`` last: its sync ends the GPU work, as the window needs
                exempt |= {id(c) for c in _statement_calls(inner[-1]) if model.sync_kind(c, function)}
            synced = bool(exempt) or _loop_ends_synced(model, inner[-1] if inner else None, function) or any(
                model.sync_kind(c, function) for c in _statement_calls(stmts[stop]))
            model.timed_regions.append(TimedRegion(
                "host-timer", "a host-timer window (perf_counter() ... perf_counter())",
                inner, function, exempt, synced, stmts[stop]))
    for stmt in model.withs:
        for item in stmt.items:
            call = item.item
            if type(call) is cst.Call and (model.call_name(call) or "") in ("torch.cuda.graph", "torch.cuda.graphs.graph"):
                model.timed_regions.append(TimedRegion(
                    "graph-capture", "a CUDA-graph capture (with torch.cuda.graph(...))",
                    [stmt.body], model.enclosing_function(stmt)))
    per_step = dict(config.per_step)
    for defs in model.functions.values():
        for fn in defs:
            name = model.scope_names.get(id(fn), fn.name.value)
            if config.is_hot_path(name):
                model.timed_regions.append(TimedRegion("hot-path", f"the per-step hot path {name}()", [fn.body], fn))
            elif name in per_step:  # the project index: reached every step from another module's hot path
                model.timed_regions.append(TimedRegion(
                    "hot-path", f"the per-step path {name}() ({per_step[name]})", [fn.body], fn))


def _loop_ends_synced(model: ModuleModel, stmt: cst.CSTNode | None, function) -> bool:
    """A loop whose body ends in a sync (``for ...: fn(); torch.cuda.synchronize()``), or in a
    statement that reads a result on the host (``print(y.sum().item())``): its last iteration
    waits for the GPU before the loop ends, as the window needs."""
    if type(stmt) not in (cst.For, cst.While) or type(stmt.body) is not cst.IndentedBlock or stmt.orelse:
        return False
    last = stmt.body.body[-1] if stmt.body.body else None
    return last is not None and (_is_sync_statement(model, last, function) or type(last) is cst.SimpleStatementLine
                                 and any(model.sync_kind(c, function) for c in _statement_calls(last)))


def ends_in_generation(model: ModuleModel, stmts: list) -> bool:
    """Whether the last statement of ``stmts`` that does more than log or query (a window's body)
    holds a ``generate()`` call (``out = model.generate(ids, max_new_tokens=n)``, also as a loop's
    last statement): a generation loop reads every step's tokens on the host to decide whether to
    stop (Hugging Face tests its stopping flag as a Python bool each step; a serving engine's
    ``generate`` returns host token ids), so it returns with its GPU work done."""
    k = _last_work(model, stmts)
    stmt = stmts[k] if k >= 0 else None
    if type(stmt) in (cst.For, cst.While) and type(stmt.body) is cst.IndentedBlock and stmt.body.body:
        body = list(stmt.body.body)  # the loop's last statement that does more than log, bind or decode
        stmt = body[_last_work(model, body)] if _last_work(model, body) >= 0 else None
    return type(stmt) is cst.SimpleStatementLine and any(
        type(c.func) is cst.Attribute and c.func.attr.value == "generate" for c in _statement_calls(stmt))


def _last_work(model: ModuleModel, stmts: list) -> int:
    """The index of the last statement of ``stmts`` that does more than log or query the device
    (:func:`_host_only`), -1 when none does."""
    k = len(stmts) - 1
    while k >= 0 and _host_only(model, stmts[k]):
        k -= 1
    return k


def _host_only(model: ModuleModel, stmt: cst.CSTNode) -> bool:
    """A statement that queues no GPU work: printing or logging, ``len``, ``str``, a query of the
    device (``torch.cuda.is_available()``), a barrier across ranks (it returns when every rank
    reached it and leaves no work of its own behind), a tokenizer's or a progress bar's methods, a
    binding of names, attributes or literals (``_ = y``, ``batch = []``), or an ``if`` whose test and
    branches are all of these (``if dist.is_initialized(): dist.barrier()``)."""
    if type(stmt) is cst.If:
        branches = [stmt.body] + ([stmt.orelse.body] if type(stmt.orelse) is cst.Else else [])
        return all(type(b) is cst.IndentedBlock and b.body and all(_host_only(model, s) for s in b.body)
                   for b in branches) and all(_host_only_call(model, c) for c in _calls_under(stmt.test))
    if type(stmt) is not cst.SimpleStatementLine:
        return False
    calls = list(_statement_calls(stmt))
    if not calls:
        return all(type(small) is cst.Pass or type(small) in (cst.Assign, cst.AnnAssign) and _plain_value(small.value)
                   for small in stmt.body)
    return all(_host_only_call(model, c) for c in calls)


def _plain_value(value: cst.CSTNode | None) -> bool:
    """A value that computes nothing: a name, an attribute of one, a literal or an empty container."""
    if value is None or type(value) in (cst.Name, cst.Integer, cst.Float, cst.SimpleString):
        return True
    if type(value) is cst.Attribute:
        return _plain_value(value.value)
    return type(value) in (cst.List, cst.Tuple, cst.Dict) and not getattr(value, "elements", None)


def _host_only_call(model: ModuleModel, call: cst.Call) -> bool:
    name = model.call_name(call) or ""
    return bool(model.log_kind(call)) or type(call.func) is cst.Name and call.func.value in HOST_ONLY_CALLS \
        or name in HOST_ONLY_FUNCTIONS or type(call.func) is cst.Attribute and bool(
            HOST_OBJECT.search(model.dotted(call.func.value) or ""))


# Objects whose methods run on the host only: a tokenizer or processor (encoding and decoding
# strings), a progress bar (``pbar.update(n)``).
HOST_OBJECT = re.compile(r"(^|[._])(tokenizer|processor|pbar|progress_bar|progress)$", re.IGNORECASE)


HOST_ONLY_CALLS = {"len", "str", "repr", "format", "round"}
HOST_ONLY_FUNCTIONS = {"torch.distributed.barrier", "torch.cuda.is_available", "torch.distributed.is_initialized",
                       "torch.cuda.device_count", "torch.cuda.current_device"}


def _is_sync_statement(model: ModuleModel, stmt: cst.CSTNode, function) -> bool:
    if type(stmt) is cst.If and stmt.orelse is None and type(stmt.body) is cst.IndentedBlock:
        # ``if torch.cuda.is_available(): torch.cuda.synchronize()``
        return bool(stmt.body.body) and all(_is_sync_statement(model, s, function) for s in stmt.body.body)
    if type(stmt) is not cst.SimpleStatementLine:
        return False
    calls = [c for c in _statement_calls(stmt) if not _is_record(model, c)]
    # ``torch.cuda.synchronize() if torch.cuda.is_available() else None``: the query queues nothing
    return any(model.sync_kind(c, function) for c in calls) and all(
        model.sync_kind(c, function) or _host_only_call(model, c) for c in calls)


def _bench_target(model: ModuleModel, call: cst.Call) -> cst.CSTNode | None:
    arg = next((a.value for a in call.args if a.keyword and a.keyword.value in ("fn", "func")), None)
    if arg is None:
        positional = [a.value for a in call.args if not a.keyword]
        arg = positional[0] if positional else None
    if type(arg) is cst.Call and (model.call_name(arg) or "").endswith("partial") and arg.args:
        arg = arg.args[0].value
    if type(arg) is cst.Lambda:
        return arg.body
    if type(arg) is cst.Name:
        target = model.local_function(arg.value)
        return target.body if target is not None else None
    return None


from kcheck.values import HOST, ON_GPU, Places, bound_to_host, reading_sync  # noqa: E402 - values reads this module's walk
