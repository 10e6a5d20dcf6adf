"""Triton values: the dtype and integer width of each value in a ``@triton.jit`` kernel, as far as
the code shows.

A small abstract interpretation over one kernel, in source order. Each value gets one of:

- ``I32`` (an integer of 32 bits or fewer: ``tl.program_id``, ``tl.arange``, runtime integer
  arguments and ``tl.constexpr`` integers that fit, and arithmetic over them), ``I64`` (``.to(tl.int64)``,
  ``tl.cast(x, tl.int64)``, an argument annotated ``tl.int64``, a load from an int64 tensor, and any
  arithmetic with an ``I64`` operand), ``INT`` (an integer of unknown width: a load from an index
  table whose tensor the module does not allocate);
- ``F32`` (fp32 or fp64), ``LOW`` (16-bit or 8-bit float, named explicitly), ``LOADED`` (floating
  data loaded from memory whose element type the module does not show: 16-bit in a 16-bit model);
- ``BOOL`` (comparisons) or None (unknown: a pointer argument, a literal, a call the model does not
  know).

A pointer cast to a typed pointer (``tl.load(p).to(tl.pointer_type(tl.int64))``, a table of
addresses) reads that type, through the local names it is built from. Otherwise pointer element
types come from the launch site first: every launch of the kernel in the module
passes a tensor the host allocates with a known dtype (``torch.empty(..., dtype=torch.float32)``,
``.float()``, ``torch.empty_like`` of such a tensor), directly, through a parameter of the launching
function its same-module callers fill that way, or through ``self.<attr>`` its class sets up. A
launch through a table the module registers the kernel in counts too (``k = _build();
k.combine[grid](...)`` with ``types.SimpleNamespace(combine=_combine)``, ``KERNELS["norm"][grid]``). Then
from the load itself (``other=-1`` is an integer sentinel) and the pointer's names (ids, counts and
offsets are integers; partials, scratch, statistics and scales are kept in fp32).

Arithmetic promotes as Triton does, for what the rules need: fp32 wins over 16-bit data, 16-bit
data over integers, int64 over int32; literals and unknown values take the other side's type.
Reshapes and slices (``tl.reshape``, ``tl.trans``, ``tl.extract_slice``, ``tl.split``, ``tl.join``...)
keep the dtype; reductions keep it (``tl.sum`` of an int64 load is an int64 sum) unless ``dtype=``
says otherwise; ``tl.dot`` accumulates in fp32 unless ``out_dtype=``. A name bound to a Python float
and reassigned in a loop is an fp32 loop-carried value.

A dtype expression (``dtype_value``) is followed through a local name assigned once, and a
``tl.constexpr`` parameter named for the data's type (``dtype``) is the data's element type unless
the module's launches or jit callers pass ``tl.float32`` for it.
"""

from __future__ import annotations

import re
import weakref
from typing import Iterator

import libcst as cst

from kcheck.model import SCOPES_AND_LAMBDAS, children, subtree, walk

I32, I64, INT = "int32", "int64", "int"
F32, LOW, LOADED = "fp32", "low", "loaded"
BOOL = "bool"
FLOATS = (F32, LOW, LOADED)
INTS = (I32, I64, INT)
# Promotion order: the first type present among the operands wins.
_ORDER = (F32, LOW, LOADED, I64, INT, I32, BOOL)

_TL = {"float32": F32, "float64": F32, "fp32": F32, "float16": LOW, "bfloat16": LOW, "fp16": LOW, "bf16": LOW,
       "float8e4nv": LOW, "float8e5": LOW, "float8e4b15": LOW, "float8e4b8": LOW, "float8e5b16": LOW,
       "int64": I64, "uint64": I64, "int32": I32, "uint32": I32, "int16": I32, "uint16": I32, "int8": I32,
       "uint8": I32, "int1": BOOL}
_TORCH = {"float32": F32, "float": F32, "float64": F32, "double": F32, "float16": LOW, "half": LOW,
          "bfloat16": LOW, "float8_e4m3fn": LOW, "float8_e5m2": LOW, "float8_e4m3fnuz": LOW, "float8_e5m2fnuz": LOW,
          "int64": I64, "long": I64, "int32": I32, "int": I32, "int16": I32, "int8": I32, "uint8": I32,
          "bool": BOOL}
# Tensor methods that turn a tensor into one of a fixed dtype.
_TORCH_METHOD = {"float": F32, "double": F32, "half": LOW, "bfloat16": LOW, "long": I64, "int": I32,
                 "bool": BOOL}
# Host calls that allocate a tensor; ``dtype=`` says its element type.
TORCH_ALLOC = {"empty", "zeros", "ones", "full", "empty_strided", "randn", "rand", "tensor", "arange",
               "empty_like", "zeros_like", "ones_like", "full_like", "randn_like", "rand_like"}
# Tensor methods that keep the receiver's element type.
SAME_DTYPE = {"view", "reshape", "contiguous", "flatten", "transpose", "permute", "squeeze", "unsqueeze",
              "expand", "narrow", "clone", "detach", "t", "zero_", "fill_", "view_as", "reshape_as", "to",
              "cuda", "as_strided", "select", "unflatten", "movedim"}

# Pointers whose loads are integers (indices, counts, lengths), not activations.
INT_POINTER = re.compile(r"idx|ids|cnt|index|indices|offset|count|len|mask|pos|expert|table|slot|seq|parent",
                         re.IGNORECASE)
# Pointers to buffers kernels keep in fp32: split-K partials, scratch, running sums and maxima,
# denominators, normalisation statistics, scales. ``den`` only as a word of the name: ``hidden``
# is the activations.
F32_POINTER = re.compile(r"part|scratch|segm|acc|lse|sum|max|denom|(?:^|_)den(?:_|$)|mean|rstd|var|stat|scale|amax"
                         r"|fp32|f32|float32", re.IGNORECASE)
# A constexpr parameter named for the element type of the data (``dtype``, ``input_dtype``), not
# for an accumulator's or output's type chosen apart from it.
DATA_DTYPE = re.compile(r"(?:(?:input|in|x|data|elem|element)_)?dtype", re.IGNORECASE)
# Parameters named for sizes and strides, not buffers (``max_seq_len``, ``state_stride``).
SIZE_NAME = re.compile(r"len|size|stride|num|dim|count|^n_|_n$", re.IGNORECASE)

# triton.language calls that keep their first argument's dtype: shapes, slices, orderings, math.
_SAME = {"reshape", "view", "trans", "permute", "broadcast_to", "expand_dims", "extract_slice", "insert_slice",
         "ravel", "flip", "sort", "cumsum", "cumprod", "interleave", "join", "split", "abs", "clamp",
         "multiple_of", "max_contiguous", "max_constancy", "associative_scan", "reduce", "xor_sum", "sum", "max",
         "min", "broadcast", "advance", "fma", "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "sin",
         "cos", "sigmoid", "softmax", "erf", "floor", "ceil", "div_rn", "fdiv", "tanh", "maximum", "minimum",
         "umulhi", "cdiv"}
# ...of which these combine every argument (not a shape or an axis).
_ELEMENTWISE = {"maximum", "minimum", "fma", "join", "interleave", "fdiv", "div_rn", "cdiv", "umulhi"}
_INDEX = {"program_id", "num_programs", "arange", "argmax", "argmin", "histogram"}
# Methods of a Triton value that keep its dtype.
_SAME_METHOD = {"reshape", "view", "trans", "permute", "broadcast_to", "expand_dims", "ravel", "split", "sum",
                "max", "min", "cumsum", "flip", "sort", "T", "__getitem__"}
# Loop builtins whose target follows the bounds' width.
_RANGES = {"range", "tl.range", "tl.static_range", "triton.language.range", "triton.language.static_range"}


def promote(types) -> str | None:
    """The type of an arithmetic result over operands of ``types`` (None: unknown, a literal)."""
    present = set(types)
    return next((t for t in _ORDER if t in present), None)


def _tl_name(model, node) -> str | None:
    name = model.qualname(node) or ""
    for prefix in ("triton.language.", "tl."):
        if name.startswith(prefix):
            return name[len(prefix):]
    return None


def tl_dtype(model, node) -> str | None:
    """``tl.float32``, ``tl.int64``... as a model type (``tl.core.int64`` too); None otherwise."""
    name = _tl_name(model, node)
    return _TL.get(name.split(".")[-1]) if name else None


def torch_dtype(model, node) -> str | None:
    name = model.qualname(node) or ""
    return _TORCH.get(name[len("torch."):]) if name.startswith("torch.") else None


def arg(call: cst.Call, index: int, keyword: str) -> cst.BaseExpression | None:
    """The argument given by ``keyword`` or at positional ``index``."""
    for a in call.args:
        if a.keyword is not None and a.keyword.value == keyword:
            return a.value
    positional = []
    for a in call.args:
        if a.star:  # ``f(*args)``: positions after it are unknown
            break
        if a.keyword is None:
            positional.append(a.value)
    return positional[index] if 0 <= index < len(positional) else None


def param_arg(call: cst.Call, fn: cst.FunctionDef, name: str) -> cst.BaseExpression | None:
    """What ``call`` (a call that reaches ``fn``) passes for ``fn``'s parameter ``name``; None when
    it passes nothing for it (a default), or the receiver (``self``/``cls``, never an argument of a
    bound call ``obj.m(...)``), or the position cannot be known."""
    ps = fn.params
    positional = [p.name.value for p in [*ps.posonly_params, *ps.params]]
    if name not in positional:
        kwonly = {p.name.value for p in ps.kwonly_params}
        return arg(call, -1, name) if name in kwonly else None
    index = positional.index(name)
    if positional[0] in ("self", "cls") and type(call.func) is cst.Attribute:
        index -= 1  # ``self.m(a)`` binds ``a`` to the second parameter
    if index < 0:
        return None
    return arg(call, index, name)


def _names(node) -> set[str]:
    return {n.value for n in subtree(node, SCOPES_AND_LAMBDAS) if type(n) is cst.Name}


def _float_literal(expr) -> bool:
    """``0.0``, ``-1e30``, ``float("inf")``, ``-float("inf")``."""
    if type(expr) is cst.UnaryOperation:
        expr = expr.expression
    if type(expr) is cst.Float:
        return True
    return type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "float"


class KernelValues:
    """The types of one kernel's values: ``of(expr)`` at the statement holding ``expr``."""

    def __init__(self, model, fn: cst.FunctionDef) -> None:
        self.model, self.fn = weakref.proxy(model), fn  # the model caches this: no cycle through it
        ps = fn.params
        self.params: dict[str, cst.Param] = {p.name.value: p for p in [*ps.posonly_params, *ps.params,
                                                                        *ps.kwonly_params]}
        self.constexprs: set[str] = set()
        self.param_types: dict[str, str | None] = {}
        for name, p in self.params.items():
            ann = p.annotation.annotation if p.annotation is not None else None
            if ann is None:
                continue
            text = ann.evaluated_value if type(ann) is cst.SimpleString else (model.qualname(ann) or "")
            if text.split(".")[-1] == "constexpr":
                self.constexprs.add(name)
            else:
                self.param_types[name] = tl_dtype(model, ann) if type(ann) is not cst.SimpleString else \
                    _TL.get(text.split(".")[-1])
        self.elements = launch_dtypes(model, fn)  # pointer parameter -> element type at every launch
        self.assigned: dict[str, list[cst.BaseExpression]] = {}
        self._env_at: dict[int, dict[str, str | None]] = {}
        self._cache: dict[int, str | None] = {}
        self._env: dict[str, str | None] = {}
        self._carried = self._float_carried()
        self._run(fn.body)
        self.final = self._env

    # -- queries --------------------------------------------------------------------------------

    def of(self, expr: cst.CSTNode) -> str | None:
        """The type of ``expr``, given the assignments before its statement."""
        key = id(expr)
        if key not in self._cache:
            self._cache[key] = self._eval(expr, self._env_for(expr))
        return self._cache[key]

    def is_int64(self, expr) -> bool:
        return self.of(expr) == I64

    def element(self, pointer: cst.CSTNode | None, call: cst.Call | None = None) -> str | None:
        """The element type of what ``tl.load(pointer, ...)`` reads (see the module docstring)."""
        if pointer is None:
            return None
        env = self._env_for(pointer)
        return self._load(pointer, call, env)

    def dtype_value(self, node: cst.CSTNode | None, depth: int = 3) -> str | None:
        """The type a dtype expression names: ``tl.bfloat16``, ``x_ptr.dtype.element_ty`` (the
        pointer's element type; LOADED when the module does not show it), ``x.dtype``; a local
        name through its one assignment (``acc_dtype = c_ptr.type.element_ty``), and a
        ``tl.constexpr`` parameter named for the data's type (see ``_named_dtype``)."""
        if node is None:
            return None
        found = tl_dtype(self.model, node)
        if found is not None:
            return found
        if type(node) is cst.Name:
            return self._named_dtype(node.value, depth)
        text = self.model.dotted(node) or ""
        base = text.split(".")[0]
        if text.endswith(".dtype.element_ty") or text.endswith(".type.element_ty"):
            if base in self.params:
                return self._pointer_type(base)
            return None
        if text.endswith(".dtype") and type(node) is cst.Attribute:
            if base in self.params:
                return self._pointer_type(base)
            return self.of(node.value)
        return None

    def _named_dtype(self, name: str, depth: int) -> str | None:
        """A dtype held by a name: a local assigned once (followed to ``depth``), or a constexpr
        parameter called for the data's type (``dtype``, ``input_dtype``, not ``acc_dtype`` or
        ``out_dtype``): what the launches and jit callers in the module pass for it, else the
        data's element type as read from memory (LOADED: a launcher that passes
        ``x.dtype``-derived values from another module)."""
        values = self.assigned.get(name)
        if values is not None:
            return self.dtype_value(values[0], depth - 1) if len(values) == 1 and depth > 0 else None
        if name not in self.constexprs or not DATA_DTYPE.fullmatch(name):
            return None
        passed = set()
        for call in self.model.callers(self.fn) + list(_kernel_launches(self.model, self.fn.name.value)):
            value = param_arg(call, self.fn, name)
            if value is not None:
                passed.add(tl_dtype(self.model, value) or torch_dtype(self.model, value))
        known = passed - {None}
        if F32 in known or any(t in INTS for t in known):
            return F32 if F32 in known else None
        return LOW if known == {LOW} else LOADED

    def buffers(self, pointer: cst.CSTNode) -> set[str]:
        """The kernel's runtime parameters a pointer expression is built from, through the local
        names it uses (``row = state_ptr + slot * stride``) but not through loads (an index loaded
        from a block table is not the buffer)."""
        found: set[str] = set()
        seen: set[str] = set()
        todo = [pointer]
        while todo:
            for name in self._names_outside_loads(todo.pop()):
                if name in self.params:
                    found.add(name)
                elif self.assigned.get(name) and name not in seen and len(seen) < 32:
                    seen.add(name)
                    todo.extend(self.assigned[name])
        return found - self.constexprs

    # -- the walk -------------------------------------------------------------------------------

    def _env_for(self, node) -> dict:
        for anc in [node, *self.model.ancestors(node)]:
            env = self._env_at.get(id(anc))
            if env is not None:
                return env
            if anc is self.fn:
                break
        return self._env

    def _run(self, body) -> None:
        for node in subtree(body, SCOPES_AND_LAMBDAS):
            kind = type(node)
            if kind is cst.SimpleStatementLine:
                self._env_at[id(node)] = dict(self._env)
                for stmt in node.body:
                    self._assign(stmt)
            elif kind in (cst.If, cst.While):
                self._env_at[id(node.test)] = dict(self._env)
            elif kind is cst.For:
                self._env_at[id(node.iter)] = dict(self._env)
                self._bind(node.target, self._loop_type(node.iter))

    def _assign(self, stmt) -> None:
        env = self._env
        if type(stmt) is cst.Assign:
            value = self._eval(stmt.value, env)
            for t in stmt.targets:
                self._record(t.target, stmt.value)
                if type(t.target) is cst.Name and _float_literal(stmt.value):
                    value = F32 if t.target.value in self._carried else None
                self._bind(t.target, value)
        elif type(stmt) is cst.AnnAssign and stmt.value is not None:
            self._record(stmt.target, stmt.value)
            self._bind(stmt.target, tl_dtype(self.model, stmt.annotation.annotation) or self._eval(stmt.value, env))
        elif type(stmt) is cst.AugAssign and type(stmt.target) is cst.Name:
            self._record(stmt.target, stmt.value)
            name = stmt.target.value
            if type(stmt.operator) is cst.DivideAssign:
                env[name] = promote([self._name(name, env), self._eval(stmt.value, env), F32])
            else:
                env[name] = promote([self._name(name, env), self._eval(stmt.value, env)])

    def _record(self, target, value) -> None:
        if type(target) is cst.Name:
            self.assigned.setdefault(target.value, []).append(value)
        elif type(target) in (cst.Tuple, cst.List):
            for e in target.elements:
                self._record(e.value, value)

    def _bind(self, target, value: str | None) -> None:
        if type(target) is cst.Name:
            self._env[target.value] = value
        elif type(target) in (cst.Tuple, cst.List):  # a, b = tl.split(x): both halves keep x's type
            for e in target.elements:
                self._bind(e.value, value)

    def _loop_type(self, it) -> str | None:
        if type(it) is cst.Call and ((self.model.call_name(it) or "") in _RANGES):
            bounds = [self._eval(a.value, self._env) for a in it.args if a.keyword is None]
            return I64 if I64 in bounds else I32
        return None

    def _float_carried(self) -> set[str]:
        """Names bound to a Python float (``m = -float("inf")``, ``acc = 0.0``) and assigned again
        inside a loop: Triton makes such a loop-carried value an fp32 tensor."""
        floats: set[str] = set()
        in_loops: set[str] = set()
        for node in subtree(self.fn.body, SCOPES_AND_LAMBDAS):
            if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name \
                    and _float_literal(node.value):
                floats.add(node.targets[0].target.value)
            elif type(node) in (cst.For, cst.While):
                for sub in subtree(node.body, SCOPES_AND_LAMBDAS):
                    if type(sub) is cst.Assign:
                        in_loops.update(t.target.value for t in sub.targets if type(t.target) is cst.Name)
                    elif type(sub) is cst.AugAssign and type(sub.target) is cst.Name:
                        in_loops.add(sub.target.value)
        return floats & in_loops

    # -- evaluation -----------------------------------------------------------------------------

    def _name(self, name: str, env: dict) -> str | None:
        if name in env:
            return env[name]
        if name in self._carried:
            return F32
        return self.param_types.get(name)

    def _eval(self, expr, env: dict) -> str | None:
        kind = type(expr)
        if kind is cst.Name:
            return self._name(expr.value, env)
        if kind is cst.BinaryOperation:
            op = type(expr.operator)
            left, right = self._eval(expr.left, env), self._eval(expr.right, env)
            if op in (cst.LeftShift, cst.RightShift):
                return left
            if op is cst.FloorDivide:  # Triton's // takes integers only: loaded counts are integers
                return promote([INT if t in FLOATS else t for t in (left, right)])
            if op is cst.Divide:  # true division of integers gives fp32
                return promote([left, right]) if {left, right} & set(FLOATS) else F32
            return promote([left, right])
        if kind is cst.UnaryOperation:
            return BOOL if type(expr.operator) is cst.Not else self._eval(expr.expression, env)
        if kind in (cst.Comparison, cst.BooleanOperation):
            return BOOL
        if kind is cst.Subscript:
            return self._eval(expr.value, env)
        if kind is cst.IfExp:
            return promote([self._eval(expr.body, env), self._eval(expr.orelse, env)])
        if kind is cst.Attribute:
            return self._eval(expr.value, env) if expr.attr.value == "T" else None
        if kind is cst.Call:
            return self._call(expr, env)
        return None

    def _call(self, call: cst.Call, env: dict) -> str | None:
        model = self.model
        func = call.func
        op = _tl_name(model, func)
        if op is not None and "(" in op:
            op = None  # tl.load(...).to(...): a method of a value
        if op is None and type(func) is cst.Attribute:  # a method of a value: x.to(...), x.reshape(...)
            method = func.attr.value
            if method == "to" and call.args:
                return self._cast(arg(call, 0, "dtype"))
            if method in ("max", "min") and not any(a.keyword and a.keyword.value == "return_indices" for a in call.args):
                return _widened_extreme(self._eval(func.value, env))
            if method in _SAME_METHOD:
                return self._eval(func.value, env)
            return None
        if op is None:
            return None
        op = op.split(".")[-1]  # tl.math.exp, tl.extra.cuda.libdevice.exp
        if op in _INDEX:
            return I32
        if op == "cast":
            return self._cast(arg(call, 1, "dtype"))
        if op == "load":
            return self._load(arg(call, 0, "pointer"), call, env)
        if op in ("atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and",
                  "atomic_or", "atomic_xor"):
            return self._load(arg(call, 0, "pointer"), None, env)
        if op in ("zeros", "full"):
            return self.dtype_value(arg(call, 1 if op == "zeros" else 2, "dtype"))
        if op in ("zeros_like", "full_like"):
            given = arg(call, 99, "dtype")
            return self.dtype_value(given) if given is not None else self._eval(arg(call, 0, "input"), env)
        if op == "dot":
            out = arg(call, 99, "out_dtype")
            return self.dtype_value(out) if out is not None else F32
        if op in ("sum", "reduce", "cumsum", "max", "min"):
            given = arg(call, 99, "dtype")
            if given is not None:
                return self.dtype_value(given)
            if op in ("max", "min") and call.args:
                return _widened_extreme(self._eval(call.args[0].value, env))
        if op == "where":
            return promote([self._eval(a.value, env) for a in call.args[1:3]])
        if op in _ELEMENTWISE:
            return promote([self._eval(a.value, env) for a in call.args if a.keyword is None])
        if op in _SAME and call.args:
            return self._eval(call.args[0].value, env)
        return None

    def _cast(self, target) -> str | None:
        """The type of a cast to ``target``: a pointer's element type the module does not show is
        unknown (LOADED would call the cast data read from memory)."""
        found = self.dtype_value(target)
        return None if found == LOADED else found

    def _load(self, pointer, call: cst.Call | None, env: dict) -> str | None:
        if pointer is None:
            return None
        cast = self._pointer_cast(pointer)
        if cast is not None:  # tl.load(p.to(tl.pointer_type(tl.int64))): the cast names the element type
            return LOADED if cast == LOW else cast
        bases = _names(pointer) & set(self.params)
        buffers = self.buffers(pointer)
        known = {self.elements[b] for b in buffers if b in self.elements}
        if len(known) == 1:  # what every launch passes for the pointer; 16-bit data read from memory
            return LOADED if known == {LOW} else next(iter(known))
        other = arg(call, 2, "other") if call is not None else None
        if type(other) is cst.UnaryOperation and type(other.expression) is cst.Integer:
            return INT  # other=-1: a sentinel of an integer load
        named = _names(pointer)
        if any(INT_POINTER.search(n) for n in named - bases if n.endswith(("_ptr", "_base", "_ptrs"))):
            return INT  # a local pointer named for ids or counts
        if any(F32_POINTER.search(n) for n in named):
            return F32  # partial sums, maxima, statistics and scales are kept in fp32
        if any(F32_POINTER.search(n) and not SIZE_NAME.search(n) for n in buffers - bases):
            return F32  # row = state_ptr + slot * stride; tl.load(row + d): the buffer is named
        return INT if any(INT_POINTER.search(n) for n in bases) else LOADED

    def _pointer_cast(self, pointer) -> str | None:
        """The element type a pointer expression is cast to (``x.to(tl.pointer_type(tl.int64))``,
        ``tl.cast(x, tl.pointer_type(T))``), directly or through the local names it is built from."""
        seen: set[str] = set()
        todo = [pointer]
        while todo:
            node = todo.pop()
            if type(node) is cst.Call:
                target = arg(node, 0, "dtype") if type(node.func) is cst.Attribute and node.func.attr.value == "to" \
                    else arg(node, 1, "dtype") if _tl_name(self.model, node.func) == "cast" else None
                if type(target) is cst.Call and _tl_name(self.model, target.func) == "pointer_type" and target.args:
                    return tl_dtype(self.model, target.args[0].value)
                if _tl_name(self.model, node.func) == "load":
                    continue  # an index loaded from a table is not the pointer
            if type(node) is cst.Name and node.value not in seen and node.value in self.assigned and len(seen) < 16:
                seen.add(node.value)
                todo.extend(self.assigned[node.value])
            todo.extend(children(node))
        return None

    def _pointer_type(self, param: str) -> str | None:
        """The element type of a pointer parameter: from the launches, else by its name."""
        if param in self.elements:
            return self.elements[param]
        if INT_POINTER.search(param):
            return INT
        return LOADED

    def _names_outside_loads(self, expr) -> Iterator[str]:
        stack = [expr]
        while stack:
            node = stack.pop()
            if type(node) is cst.Call and _tl_name(self.model, node.func) == "load":
                continue
            if type(node) is cst.Name:
                yield node.value
                continue
            stack.extend(children(node))


def values(model, fn: cst.FunctionDef) -> KernelValues:
    """The kernel's values, computed once per module model."""
    cache = model.__dict__.setdefault("_triton_values", {})
    found = cache.get(id(fn))
    if found is None or found.fn is not fn:
        found = cache[id(fn)] = KernelValues(model, fn)
    return found


# -- what the host passes ---------------------------------------------------------------------------


def launch_dtypes(model, fn: cst.FunctionDef) -> dict[str, str]:
    """For each kernel parameter, the element type of the tensor every launch of the kernel in this
    module (one at least) passes for it, where each launch shows the same one."""
    name = fn.name.value
    ps = fn.params
    order = [p.name.value for p in [*ps.posonly_params, *ps.params, *ps.kwonly_params]]
    seen: dict[str, list[str | None]] = {}
    host = _Host(model)
    aliases = _registered_as(model, name)
    for call in model.calls:  # every ``kernel[grid](...)``, also one through a table of kernels
        func = call.func
        if not (type(func) is cst.Subscript and _launches(model, func.value, name, aliases)):
            continue
        where = model.enclosing_function(call)
        passed, positional = {}, []
        for a in call.args:
            if a.star:
                break  # ``*x.stride()``: the positions after it are unknown
            if a.keyword is None:
                positional.append(a.value)
        passed.update(zip(order, positional))
        passed.update({a.keyword.value: a.value for a in call.args if a.keyword is not None})
        for p in order:
            value = passed.get(p)
            seen.setdefault(p, []).append(host.dtype(value, where, 2, frozenset()) if value is not None else None)
    return {p: ts[0] for p, ts in seen.items() if ts and ts[0] is not None and all(t == ts[0] for t in ts)}


def _kernel_launches(model, name: str) -> Iterator[cst.Call]:
    """Every ``name[grid](...)`` launch in the module."""
    for call in model.calls:
        if type(call.func) is cst.Subscript and model.dotted(call.func.value) == name:
            yield call


def _registered_as(model, name: str) -> set[str]:
    """The names the module registers kernel ``name`` under: a keyword of a call
    (``types.SimpleNamespace(combine=_combine)``, ``dict(combine=_combine)``) or a string key of a
    dict literal (``{"combine": _combine}``), a table of kernels the launches look up."""
    table = model.__dict__.get("_triton_registry")
    if table is None:
        table = model.__dict__["_triton_registry"] = {}
        for node in walk(model.module) if model.module is not None else ():
            if type(node) is cst.Call:
                pairs = [(a.keyword.value, a.value) for a in node.args if a.keyword is not None]
            elif type(node) is cst.Dict:
                pairs = [(el.key.evaluated_value, el.value) for el in node.elements
                         if type(el) is cst.DictElement and type(el.key) is cst.SimpleString]
            else:
                continue
            for alias, value in pairs:
                if type(value) is cst.Name and isinstance(alias, str):
                    table.setdefault(value.value, set()).add(alias)
    return table.get(name, set())


def _launches(model, launched, name: str, aliases: set[str]) -> bool:
    """``name[grid](...)``, or a launch through the table the kernel is registered in
    (``k.combine[grid](...)``, ``KERNELS["combine"][grid](...)``)."""
    if model.dotted(launched) == name:
        return True
    if type(launched) is cst.Attribute:
        return launched.attr.value in aliases
    if type(launched) is cst.Subscript and len(launched.slice) == 1:
        key = launched.slice[0].slice
        return type(key) is cst.Index and type(key.value) is cst.SimpleString \
            and key.value.evaluated_value in aliases
    return False


class _Host:
    """The dtype of a tensor the host code of the module passes (None when it does not show)."""

    def __init__(self, model) -> None:
        self.model = model
        self._assigns: dict[int, dict[str, list]] = {}

    def dtype(self, expr, fn, depth: int, visiting: frozenset) -> str | None:
        model = self.model
        if type(expr) is cst.Subscript:
            return self.dtype(expr.value, fn, depth, visiting)
        if type(expr) is cst.Call:
            name = model.call_name(expr) or ""
            func = expr.func
            if name.startswith("torch.") and name[len("torch."):] in TORCH_ALLOC:
                dtype = arg(expr, 99, "dtype")
                if dtype is not None:
                    return torch_dtype(model, dtype)
                source = arg(expr, 0, "input") if name.endswith("_like") else None
                return self.dtype(source, fn, depth, visiting) if source is not None else None
            if type(func) is not cst.Attribute:
                return None
            method = func.attr.value
            if method in _TORCH_METHOD and not expr.args:
                return _TORCH_METHOD[method]
            if method in ("new_empty", "new_zeros", "new_ones", "new_full"):
                dtype = arg(expr, 99, "dtype")
                return torch_dtype(model, dtype) if dtype is not None else self.dtype(func.value, fn, depth, visiting)
            dtypes = [torch_dtype(model, a.value) for a in expr.args
                      if (a.keyword is None or a.keyword.value == "dtype") and torch_dtype(model, a.value)]
            if method in ("to", "view", "type") and dtypes:
                return dtypes[-1]
            if method == "to" and any((model.dotted(a.value) or "").endswith("dtype") for a in expr.args):
                return None  # x.to(y.dtype): whatever y holds
            if method in SAME_DTYPE:
                return self.dtype(func.value, fn, depth, visiting)
            return None
        if type(expr) is cst.Attribute and type(expr.value) is cst.Name and expr.value.value == "self" \
                and fn is not None:
            owner = next((a for a in model.ancestors(fn) if type(a) is cst.ClassDef), None)
            key = (id(owner), expr.attr.value)
            if owner is None or key in visiting:
                return None
            visiting = visiting | {key}
            sources = [(v, model.enclosing_function(v)) for v in _self_assigns(owner, expr.attr.value)]
            return _agree([self.dtype(v, f, depth, visiting) for v, f in sources])
        if type(expr) is cst.Name and fn is not None:
            key = (id(fn), expr.value)
            if key in visiting:
                return "loop"  # ``x = x.view(...)``: decided by x's other sources
            visiting = visiting | {key}
            asserted = _asserted_dtype(model, fn, expr.value)
            if asserted is not None:
                return asserted  # ``assert logits.dtype == torch.float32``: whatever its sources, it is that
            assigns = self._assigns.get(id(fn))
            if assigns is None:
                assigns = self._assigns[id(fn)] = {}
                for target, v in _host_assigns(fn):
                    assigns.setdefault(target, []).append(v)
            found = ["loop" if _cached_copy(model, fn, v, expr.value) else self.dtype(v, fn, depth, visiting)
                     for v in assigns.get(expr.value, [])]
            ps = fn.params
            params = [p.name.value for p in [*ps.posonly_params, *ps.params, *ps.kwonly_params]]
            if expr.value in params:
                callers = model.callers(fn) if depth > 0 else []
                if not callers:
                    return None
                index = params.index(expr.value)
                for call in callers:
                    shift = 1 if params and params[0] in ("self", "cls") and type(call.func) is cst.Attribute else 0
                    value = arg(call, index - shift, expr.value)
                    found.append(self.dtype(value, model.enclosing_function(call), depth - 1, visiting)
                                 if value is not None else None)
            found = [t for t in found if t != "loop"]
            return _agree(found)
        return None


def _cached_copy(model, fn: cst.FunctionDef, value, name: str) -> bool:
    """``buf = CACHE.get(key)`` (or ``CACHE[key]``) where the function stores ``CACHE[key] = buf``:
    the cache holds what the name's other sources make, so they decide its dtype."""
    if type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value == "get":
        store = model.dotted(value.func.value)
    elif type(value) is cst.Subscript:
        store = model.dotted(value.value)
    else:
        return False
    if not store:
        return False
    for node in walk(fn.body, into_scopes=False):
        if type(node) is cst.Assign and type(node.value) is cst.Name and node.value.value == name and any(
                type(t.target) is cst.Subscript and model.dotted(t.target.value) == store for t in node.targets):
            return True
    return False


def _asserted_dtype(model, fn: cst.FunctionDef, name: str) -> str | None:
    """The one dtype a host function asserts ``name`` has (``assert x.dtype == torch.float32``,
    ``assert x.dtype in (torch.float32,)``), or None."""
    for node in walk(fn.body, into_scopes=False):
        if type(node) is not cst.Assert or type(node.test) is not cst.Comparison:
            continue
        test = node.test
        left = test.left
        if not (type(left) is cst.Attribute and left.attr.value == "dtype" and type(left.value) is cst.Name
                and left.value.value == name and len(test.comparisons) == 1):
            continue
        op, right = test.comparisons[0].operator, test.comparisons[0].comparator
        if type(op) is cst.Equal:
            found = torch_dtype(model, right)
        elif type(op) is cst.In and type(right) in (cst.Tuple, cst.List, cst.Set) and len(right.elements) == 1:
            found = torch_dtype(model, right.elements[0].value)
        else:
            continue
        if found is not None:
            return found
    return None


def _agree(types: list) -> str | None:
    return types[0] if types and types[0] is not None and all(t == types[0] for t in types) else None


def _host_assigns(fn: cst.FunctionDef) -> list[tuple[str, cst.BaseExpression]]:
    """(name, value) for every ``name = value`` in a host function's own body."""
    out = []
    for node in walk(fn.body, into_scopes=False):
        if type(node) is cst.Assign:
            out += [(t.target.value, node.value) for t in node.targets if type(t.target) is cst.Name]
        elif type(node) is cst.AnnAssign and type(node.target) is cst.Name and node.value is not None:
            out.append((node.target.value, node.value))
    return out


def _self_assigns(owner: cst.ClassDef, attr: str) -> list[cst.BaseExpression]:
    """The values every method of a class assigns to ``self.<attr>``."""
    out = []
    for node in walk(owner.body):
        if type(node) in (cst.Assign, cst.AnnAssign) and node.value is not None:
            targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]
            if any(type(t) is cst.Attribute and type(t.value) is cst.Name and t.value.value == "self"
                   and t.attr.value == attr for t in targets):
                out.append(node.value)
    return out


def _widened_extreme(value: str | None) -> str | None:
    """``tl.max``/``tl.min`` of a float narrower than 32 bits reduce in fp32 (Triton converts the
    input first; ``tl.sum`` does not): a loaded or 16-bit float's maximum is an fp32 value."""
    return F32 if value in (LOW, LOADED, F32) else value
