"""Values: where a tensor lives, as far as one module shows it.

A small abstract interpretation over each function, computed when a rule first asks and shared by
every rule (``ModuleModel.places``). Every expression gets a **place**:

- ``HOST``: a Python value, a NumPy array or a tensor on the CPU (``torch.tensor(lens)``,
  ``x.cpu()``, ``x.tolist()``, ``x.shape[0]``, a name the code marks as the host's: ``seq_lens_cpu``,
  ``starts_np``, ``host_ids``);
- ``DEVICE``: a tensor on the GPU (``torch.zeros(n, device="cuda")``, ``x.cuda()``, an op on one);
- ``TENSOR``: a tensor whose device the module does not show (a parameter annotated
  ``torch.Tensor``, a torch op's result, ``topk_ids.max()`` of such a parameter, a module's
  parameter or registered buffer, which moves with the module); on a serving path or in a
  benchmark that is the GPU's;
- ``None``: not known (a call of a function in another module, an untyped parameter).

Names are flow-insensitive: a local name's place joins every value bound to it in the function
(so a name rebound from a CPU tensor to a GPU one is not known), a ``self.x`` attribute's joins
every ``self.x = ...`` in the methods of its class. That is enough to tell ``int(x.sum())`` on the
GPU (a host sync) from ``int(x.shape[0])`` (metadata) and ``lens_cpu.tolist()`` (no sync).
"""

from __future__ import annotations

import re
import weakref

import libcst as cst

HOST, DEVICE, TENSOR = "host", "device", "tensor"
ON_GPU = (DEVICE, TENSOR)

# The engines' naming rule for host-resident copies (``seq_lens_cpu``, ``starts_np``,
# ``host_positions``, a CpuGpuBuffer's ``.np``/``.cpu``) and for the device side (``.gpu``).
HOST_NAME = re.compile(r"(^|_)cpu(_|$)|(^|_)np$|^np_|_numpy$|^host_|_host$|(^|_)grid_thws?$")
# Configuration objects: what they hold is Python values read on the host (``config.n_head``,
# ``self.model_config.hidden_size``, ``args.num_heads``), never a device tensor.
CONFIG_NAME = re.compile(r"^(config|cfg|conf|args|opts|options|settings|hparams)$|_(config|cfg|args)$")
# (not a flag named for the device: ``_is_cuda``, ``use_gpu``, ``has_cuda``)
DEVICE_NAME = re.compile(r"^(?!_?(is|use|has|have|enable|enabled|on|run|with)_)"
                         r"(.*(^|_)gpu$|gpu_.*|.*(^|_)cuda$|d_.*|.*_dev$|.*_device_tensor$)")
# NumPy arrays, Python scalars and containers of them (not a bare ``list``: ``states: list[dict]``
# may hold GPU tensors)
HOST_ANNOTATION = re.compile(
    r"^(np|numpy)\.(nd)?array$|NDArray|^(int|float|bool|str)$"
    r"|^(list|List|tuple|Tuple|Sequence)\[(int|float|bool|str)(, \.\.\.)?\]$"
    r"|^(tuple|Tuple)\[(int|float|bool|str)(, (int|float|bool|str))+\]$")
# (the typed aliases too: ``torch.LongTensor``, ``torch.FloatTensor``)
TENSOR_ANNOTATION = re.compile(r"^(torch\.)?(Long|Int|Short|Char|Byte|Bool|Float|Double|Half|BFloat16)?Tensor$")
# metadata read on the host: no sync, whatever the tensor's device
METADATA_ATTRS = {"shape", "dtype", "device", "ndim", "is_cuda", "is_cpu", "layout", "requires_grad",
                  "is_sparse", "itemsize", "nbytes", "names"}
HOST_METHODS = {"item", "tolist", "numpy", "cpu", "size", "numel", "dim", "stride", "data_ptr", "element_size",
                "is_contiguous", "get_device", "nelement", "storage_offset", "pin_memory", "untyped_storage"}
# Methods a torch tensor has and a NumPy array or a Python container has not: a value they are
# called on is a tensor (``cu_seqlens.diff()``, ``mask.unsqueeze(-1)``, ``x.size(0)``), and so is
# what most of them return.
TORCH_ONLY_METHODS = {"unsqueeze", "unsqueeze_", "diff", "isfinite", "isnan", "isinf", "contiguous", "masked_fill",
                      "masked_fill_", "half", "bfloat16", "float", "long", "int", "bool", "double", "size", "dim",
                      "numel", "stride", "data_ptr", "element_size", "is_contiguous", "new_zeros", "new_empty",
                      "new_full", "new_ones", "new_tensor", "permute", "expand", "expand_as", "index_select",
                      "gather", "scatter", "scatter_", "scatter_add_", "narrow", "softmax", "log_softmax", "topk",
                      "eq", "ne", "lt", "gt", "le", "ge", "clamp", "clamp_", "clamp_min", "clamp_max", "add_",
                      "mul_", "sub_", "div_", "copy_", "zero_", "fill_", "detach", "clone", "view_as",
                      "repeat_interleave", "masked_select", "index_put_", "index_add_", "logical_not", "sigmoid",
                      "exp_", "type_as", "chunk", "unbind", "flip", "roll", "cuda", "record_stream"}
# reductions and comparisons: what a branch tests (``if (ids < 0).any():``)
REDUCTIONS = {"sum", "max", "min", "amax", "amin", "any", "all", "mean", "argmax", "argmin", "prod", "norm",
              "count_nonzero", "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite", "abs",
              "cumsum", "logical_and", "logical_or", "logical_not", "nonzero", "std", "var"}
FACTORIES = {"tensor", "as_tensor", "from_numpy", "empty", "zeros", "ones", "full", "arange", "rand",
             "randn", "randint", "randperm", "linspace", "eye", "empty_strided"}
LIKE_FACTORIES = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like"}
# torch's namespaces and functions that return no tensor (streams, process groups, flags, dtypes)
NOT_TENSOR_TORCH = re.compile(
    r"^torch\.(cuda|distributed|backends|compiler|_dynamo|utils|version|jit|fx|library|profiler|accelerator|_C"
    r"|mps|xpu|npu)\.|^torch\.(is_\w+|get_\w+|set_\w+|finfo|iinfo|device|dtype|Size|Generator|no_grad"
    r"|inference_mode|enable_grad|manual_seed|use_deterministic_algorithms|compile)$")
HOST_MODULES = ("numpy.", "math.", "random.", "itertools.", "os.", "time.", "json.")
HOST_BUILTINS = {"len", "int", "float", "bool", "str", "range", "isinstance", "hasattr", "getattr", "list",
                 "tuple", "dict", "set", "sorted", "enumerate", "zip", "repr", "round", "divmod", "id", "type",
                 "ord", "chr", "hash", "any", "all"}
# builtins that read a tensor's value on the host (a sync when the tensor is on the GPU)
READING_BUILTINS = {"int", "float", "bool", "complex", "max", "min", "sum", "any", "all", "range", "divmod"}
_SCALARS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString,
            cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp, cst.DictComp, cst.SetComp, cst.Ellipsis)


def join(places) -> str | None:
    """One place for all of ``places``: the common one; DEVICE and TENSOR make TENSOR; else None."""
    found = set(places)
    if len(found) == 1:
        return found.pop()
    if found and found <= {DEVICE, TENSOR}:
        return TENSOR
    return None


def _operands(places) -> str | None:
    """An operation's result over operands: on the GPU when one operand is, on the host when all are."""
    places = list(places)
    if DEVICE in places:
        return DEVICE
    if TENSOR in places:
        return TENSOR
    if places and all(p == HOST for p in places):
        return HOST
    return None


def host_tensor(expr: cst.CSTNode) -> bool:
    """A host-resident array by its spelling: a ``*_cpu``/``*_np`` name (sliced, or through
    ``.to(dtype)``-style methods) or a ``.cpu()``/``.numpy()`` result."""
    while True:
        kind = type(expr)
        if kind is cst.Subscript:
            expr = expr.value
        elif kind is cst.Call and type(expr.func) is cst.Attribute:
            if expr.func.attr.value in ("cpu", "numpy"):
                return True
            expr = expr.func.value
        elif kind is cst.Name:
            return bool(HOST_NAME.search(expr.value))
        elif kind is cst.Attribute:
            return bool(HOST_NAME.search(expr.attr.value))
        else:
            return False


def _numeric(expr: cst.CSTNode, constants: set[str]) -> bool:
    """A number, or arithmetic of numbers and ``constants``."""
    kind = type(expr)
    if kind in (cst.Integer, cst.Float):
        return True
    if kind is cst.Name:
        return expr.value in constants
    if kind is cst.UnaryOperation:
        return _numeric(expr.expression, constants)
    if kind is cst.BinaryOperation:
        return _numeric(expr.left, constants) and _numeric(expr.right, constants)
    return False


class Places:
    """``place(expr)`` for the expressions of one module (see the module's docstring)."""

    def __init__(self, model) -> None:
        self.model = weakref.proxy(model)  # the model holds this: no reference cycle to collect
        self._names: dict[int, dict[str, str | None]] = {}  # id(function) -> name -> place
        self._attrs: dict[int, dict[str, str | None]] = {}  # id(class) -> attribute -> place
        self._busy: set[int] = set()
        self._returning: set[int] = set()  # functions whose result is being computed (recursion)
        self._binds: dict[int, dict] = {}  # id(function) -> name -> [(target, value)] (assignments)
        self._closures: dict[int, tuple] = {}  # id(nested function) -> (its nonlocal names, first call)
        self._kept: set[str] | None = None
        self._constants: set[str] | None = None
        self._default: str | None = None  # default_place()

    # -- expressions --------------------------------------------------------------------------

    def place(self, node: cst.CSTNode) -> str | None:
        kind = type(node)
        if kind is cst.Name:
            if node.value in ("None", "True", "False"):
                return HOST
            return self._name(node)
        if kind in _SCALARS:
            return HOST
        if kind is cst.Attribute:
            return self._attribute(node)
        if kind is cst.Subscript:
            key = node.slice[0].slice if len(node.slice) == 1 else None
            if type(key) is cst.Index and type(key.value) is cst.SimpleString:  # ``kwargs["lens_cpu"]``
                return self._named(key.value.evaluated_value or "", self.place(node.value))
            return self.place(node.value)
        if kind is cst.Call:
            return self._call(node)
        if kind is cst.BinaryOperation or kind is cst.BooleanOperation:
            return self._operation([node.left, node.right])
        if kind is cst.Comparison:
            if all(type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in node.comparisons):
                return HOST
            return self._operation([node.left] + [c.comparator for c in node.comparisons])
        if kind is cst.UnaryOperation:
            return HOST if type(node.operator) is cst.Not and self.place(node.expression) == HOST else \
                self.place(node.expression)
        if kind is cst.IfExp:
            return join([self.place(node.body), self.place(node.orelse)])
        if kind in (cst.List, cst.Tuple) and node.elements:  # ``torch.cat([mask, pad])``
            return _operands(self.place(e.value) for e in node.elements)
        return None

    def _operation(self, operands: list[cst.CSTNode]) -> str | None:
        """An operation's place (``_operands``); a ``self.x`` of unknown place is taken for one of
        the module's constants (``token_ids_cpu == self.doc_token_id``), which moves nothing. With a
        host tensor among the operands (``lens_cpu % interval``) the rest are scalars or host
        tensors too, unless one is known on the GPU: a CPU tensor does not mix with a GPU one."""
        places = [self.place(n) for n in operands]
        known = [p for n, p in zip(operands, places) if p is not None or not _self_attribute(n)]
        if None in known and not set(known).intersection(ON_GPU) and any(host_tensor(n) for n in operands):
            return HOST
        return _operands(known)

    @staticmethod
    def _named(key: str, otherwise: str | None) -> str | None:
        """A value known by its name alone (a dict entry's key): ``*_cpu`` on the host, ``*_gpu`` on the GPU."""
        return HOST if HOST_NAME.search(key) else DEVICE if DEVICE_NAME.search(key) else otherwise

    def _name(self, node: cst.Name) -> str | None:
        if HOST_NAME.search(node.value) or node.value in self.kept_on_host():
            return HOST
        function = self.model.enclosing_function(node)
        if function is not None:
            names = self._function_names(function)
            outer = self.model.enclosing_function(function)
            nonlocals, first_call = self._closure(function, outer)
            if node.value in names and node.value not in nonlocals:
                if names[node.value] is None and self._rebound_to_host(function, node):
                    return HOST  # ``x = x.cpu()`` above this use: the host's copy from here on
                return names[node.value]
            if outer is not None:  # a closure's free (or nonlocal) name: the enclosing function's
                found = self._function_names(outer).get(node.value)
                if found is None and self._rebound_to_host(outer, node, before=first_call):
                    return HOST  # ``x = torch.tensor(...)`` above the first call of the nested function
                if found is not None:
                    return found
        if node.value in self.constants():
            return HOST  # a module's number, whatever its name says (``gpu_experts_num = expert_num``)
        if DEVICE_NAME.search(node.value):
            return DEVICE
        return None

    def _closure(self, function: cst.FunctionDef, outer: cst.FunctionDef | None) -> tuple:
        """A nested function's ``nonlocal`` names and the statement of ``outer`` that first calls it
        (each walked once per function)."""
        if outer is None:
            return frozenset(), None
        found = self._closures.get(id(function))
        if found is None:
            found = self._closures[id(function)] = (_nonlocals(function), _first_call(outer, function))
        return found

    def constants(self) -> set[str]:
        """The module's numeric constants: top-level names bound once to a number or to arithmetic
        of numbers and other such constants (``SPARSE_BLOCK_SIZE = 64``, ``MB = 1 << 20``)."""
        if self._constants is None:
            bound: dict[str, list[cst.CSTNode]] = {}
            for stmt in self.model.module.body if self.model.module is not None else ():
                if type(stmt) is cst.SimpleStatementLine:
                    for small in stmt.body:
                        if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name:
                            bound.setdefault(small.targets[0].target.value, []).append(small.value)
                        elif type(small) is cst.AnnAssign and type(small.target) is cst.Name and small.value is not None:
                            bound.setdefault(small.target.value, []).append(small.value)
            found: set[str] = set()
            grew = True
            while grew:
                grew = False
                for name, values in bound.items():
                    if name not in found and len(values) == 1 and _numeric(values[0], found):
                        found.add(name)
                        grew = True
            self._constants = found | set(self.model.config.constants)
        return self._constants

    def _rebound_to_host(self, function: cst.FunctionDef, use: cst.Name, before: cst.CSTNode | None = None) -> bool:
        """Whether the last assignment to the name written above ``use`` (or above ``before``: the
        nested function that reads it as a closure) in ``function`` binds a host value (the names'
        places are joined over the whole function; this is the one flow-sensitive question: a
        tensor copied to the host and read after the copy)."""
        index = self.model.index
        where = before if before is not None else use
        if index is None or id(where) not in index.at:
            return False
        here = index.at[id(where)]
        last = None
        for statement, value in self._bindings(function).get(use.value, ()):
            at = index.at.get(id(statement), -1)
            if 0 <= at and index.end[at] <= here and (last is None or at > last[0]):
                last = (at, value)  # an assignment that ends before the use (not ``x = f(x)`` itself)
        return last is not None and last[1] is not None and self.place(last[1]) == HOST

    def _bindings(self, function: cst.FunctionDef) -> dict[str, list[tuple[cst.CSTNode, cst.CSTNode]]]:
        found = self._binds.get(id(function))
        if found is None:
            found = self._binds[id(function)] = {}
            for node in walk(function.body, into_scopes=False):
                if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
                    found.setdefault(node.targets[0].target.value, []).append((node, node.value))
        return found

    def _returns(self, function: cst.FunctionDef) -> str | None:
        """A same-module function's result: a host value when its return annotation says so
        (``-> tuple[int, int]``, ``-> np.ndarray``), else the join of what its ``return`` statements give."""
        if function.returns is not None and HOST_ANNOTATION.search(
                _annotation_text(function.returns.annotation)):
            return HOST
        if id(function) in self._returning or type(function.body) is not cst.IndentedBlock:
            return None
        self._returning.add(id(function))
        try:
            values = [n.value for n in walk(function.body, into_scopes=False) if type(n) is cst.Return]
            return join([self.place(v) if v is not None else HOST for v in values]) if values else HOST
        finally:
            self._returning.discard(id(function))

    def kept_on_host(self) -> set[str]:
        """Inputs the module declares host-resident (vLLM's ``image_grid_thw=MultiModalFieldConfig.
        batched("image", keep_on_cpu=True)``), also without the modality prefix (``grid_thw``)."""
        if self._kept is None:
            self._kept = set()
            for call in self.model.calls:
                for arg in call.args:
                    if arg.keyword is not None and type(arg.value) is cst.Call and any(
                            a.keyword is not None and a.keyword.value == "keep_on_cpu" and type(a.value) is cst.Name
                            and a.value.value == "True" for a in arg.value.args):
                        self._kept.add(arg.keyword.value)
                        self._kept.add(re.sub(r"^(image|video|audio|vision)_", "", arg.keyword.value))
        return self._kept

    def _attribute(self, node: cst.Attribute) -> str | None:
        attr = node.attr.value
        if attr in METADATA_ATTRS:
            return HOST
        if HOST_NAME.search(attr):
            return HOST
        if attr in ("T", "mT", "data", "real", "imag"):
            return self.place(node.value)
        owner = node.value.attr.value if type(node.value) is cst.Attribute else \
            node.value.value if type(node.value) is cst.Name else ""
        if CONFIG_NAME.search(owner):
            return HOST  # ``config.n_head``: a setting
        if type(node.value) is cst.Name and node.value.value == "self":
            owner = next((a for a in self.model.ancestors(node) if type(a) is cst.ClassDef), None)
            if owner is not None:
                found = self._class_attrs(owner).get(attr)
                if found is not None:
                    return found
        if DEVICE_NAME.search(attr):
            return DEVICE
        return None

    def _call(self, call: cst.Call) -> str | None:
        model = self.model
        target = model.callee(call)
        if target is not None:
            return self._returns(target)  # a helper of this module: what it returns
        name = model.call_name(call) or ""
        func = call.func
        if name.startswith(HOST_MODULES) and "()" not in name:
            return HOST
        if type(func) is cst.Attribute and (not name.startswith(("torch.", "numpy.")) or "()" in name):
            return self._method(call, func)  # a method (of a module's function's result, too)
        if type(func) is cst.Name and func.value not in model.functions and func.value not in model.imports:
            if func.value in HOST_BUILTINS:
                return HOST
            if func.value in ("min", "max", "sum", "abs"):  # of tensors, a tensor
                return _operands([self.place(a.value) for a in call.args if a.keyword is None])
        if name.startswith(HOST_MODULES):
            return HOST
        if name.startswith("torch."):
            last = name.rsplit(".", 1)[-1]
            device = _keyword(call, "device")
            if last in FACTORIES or last in LIKE_FACTORIES:
                if device is not None:
                    return self._device_arg(device)
                if last in LIKE_FACTORIES and call.args:
                    return self.place(call.args[0].value)
                return self.default_place()  # the CPU, unless the module moves the default
            if NOT_TENSOR_TORCH.match(name):
                return None
            if last in ("Parameter", "Buffer"):
                return TENSOR  # moves with its module (``model.cuda()``), wherever it was made
            return self._operation([a.value for a in call.args if a.keyword is None]) or TENSOR
        return None

    def _method(self, call: cst.Call, func: cst.Attribute) -> str | None:
        method = func.attr.value
        receiver = func.value
        if method in HOST_METHODS:
            return HOST
        if method == "cuda":
            return DEVICE
        if method == "to":
            target = _keyword(call, "device") or (call.args[0].value if call.args and call.args[0].keyword is None
                                                    else None)
            if target is None or _is_dtype(target):
                return self.place(receiver)
            return self._device_arg(target)
        here = self.place(receiver)
        if here == HOST:
            return HOST  # a NumPy array's or a CPU tensor's methods stay on the host
        if here in ON_GPU:
            return here  # a tensor's methods give tensors where it is (the host's are above)
        if method in TORCH_ONLY_METHODS:
            return TENSOR  # only a tensor has it, so the receiver is one, and so is the result
        return None

    def default_place(self) -> str:
        """Where a factory without ``device=`` puts its tensor: the host, unless the module sets
        another default device (``torch.set_default_device(device)`` with a device that is not the
        CPU's, ``torch.set_default_tensor_type(torch.cuda.BFloat16Tensor)``), as a generator does
        before it builds its model and decode buffers."""
        if self._default is None:
            self._default = HOST
            for call in self.model.calls:
                name = self.model.call_name(call) or ""
                arg = call.args[0].value if call.args else None
                if name == "torch.set_default_device" and arg is not None and self._device_arg(arg) == DEVICE or \
                        name == "torch.set_default_tensor_type" and ".cuda." in (self.model.dotted(arg) or "") + ".":
                    self._default = DEVICE
                    break
        return self._default

    def _device_arg(self, node: cst.CSTNode) -> str | None:
        """The place a ``device=`` argument (or ``.to(x)``'s) names."""
        if type(node) is cst.SimpleString:
            text = node.evaluated_value or ""
            return HOST if text.startswith("cpu") else DEVICE if text.startswith("cuda") else None
        if type(node) is cst.Call and (self.model.call_name(node) or "") == "torch.device" and node.args:
            return self._device_arg(node.args[0].value)
        if type(node) is cst.Attribute and node.attr.value == "device":
            return self.place(node.value)
        text = self.model.dotted(node) or ""
        if HOST_NAME.search(text.rsplit(".", 1)[-1]) or "cpu" in text.lower():
            return HOST
        if type(node) in (cst.Name, cst.Attribute):
            return DEVICE  # ``device=device``, ``device=self.device``: a serving engine's device is the GPU
        return None

    # -- names ------------------------------------------------------------------------------

    def _torch_class(self, annotation: str) -> bool:
        """Whether a ``Tensor``-named annotation is torch's: written ``torch.Tensor``, or a bare name
        the module imports from torch or does not bind at all; not another library's class of that
        name (TensorRT-LLM's network ``Tensor``, from ``tensorrt_llm.functional``) or one the module
        defines."""
        head = annotation.split(".", 1)[0]
        if head in self.model.classes:
            return False
        bound = self.model.imports.get(head)
        return bound is None or bound == "torch" or bound.startswith("torch.")

    def _function_names(self, function: cst.FunctionDef) -> dict[str, str | None]:
        found = self._names.get(id(function))
        if found is not None:
            return found
        if id(function) in self._busy:
            return {}
        self._busy.add(id(function))
        found = {}
        params = function.params
        for p in [*params.posonly_params, *params.params, *params.kwonly_params]:
            if p.annotation is not None:
                text = _annotation_text(p.annotation.annotation)
                if HOST_ANNOTATION.search(text):
                    found[p.name.value] = HOST
                elif TENSOR_ANNOTATION.search(text) and self._torch_class(text):
                    found[p.name.value] = TENSOR
        defaults = [*params.params, *params.kwonly_params]
        for p in defaults:  # ``sigma=1.0``: a number, unless annotated otherwise
            if p.default is not None and type(p.default) in (cst.Integer, cst.Float) and p.name.value not in found:
                found[p.name.value] = HOST
        if self.model.config.host_params:  # every caller in the project passes a host array here
            scope = self.model.scope_names.get(id(function), "")
            found.update((param, HOST) for name, param in self.model.config.host_params if name == scope)
        bound: dict[str, list[cst.CSTNode]] = {}
        revealed: set[str] = set()  # names a tensor-only method is called on
        typed: set[str] = set()  # names the function tests with ``isinstance``
        for node in walk(function.body, into_scopes=False):
            kind = type(node)
            if kind is cst.Assign:
                for t in node.targets:
                    _bind(t.target, node.value, bound)
            elif kind is cst.AnnAssign and node.value is not None:
                _bind(node.target, node.value, bound)
            elif kind is cst.AugAssign and type(node.target) is cst.Name:
                bound.setdefault(node.target.value, []).append(node.value)
            elif kind is cst.For:
                _bind(node.target, _Element(node.iter), bound)
            elif kind is cst.Call and type(node.func) is cst.Attribute and type(node.func.value) is cst.Name \
                    and node.func.attr.value in TORCH_ONLY_METHODS:
                revealed.add(node.func.value.value)
            elif kind is cst.Call and type(node.func) is cst.Name and node.func.value == "isinstance" and node.args \
                    and type(node.args[0].value) is cst.Name:
                typed.add(node.args[0].value.value)
        for p in [*params.posonly_params, *params.params, *params.kwonly_params]:
            if p.name.value in revealed - typed and p.name.value not in found:
                # ``cu_seqlens.diff()`` in the body: a tensor, unannotated; not one the function asks
                # ``isinstance(alpha, torch.Tensor)`` of (it takes a number as well)
                found[p.name.value] = TENSOR
        declared = dict(found)  # the parameters' annotations
        self._names[id(function)] = found  # visible (partly filled) to recursive lookups
        for name, values in bound.items():  # ``ts = f(ts)`` keeps ts where its other bindings put it
            if len(values) > 1:
                plain = [v for v in values if v is not None and type(v) is not _Element and not any(
                    type(n) is cst.Name and n.value == name for n in walk(v, into_scopes=False))]
                if plain and len(plain) < len(values):
                    found[name] = join([self.place(v) for v in plain] + ([declared[name]] if name in declared else []))
        for _ in range(2):  # a second round sees names bound from names bound later in the source
            for name, values in bound.items():
                places = [self._element(v.iter) if type(v) is _Element else self.place(v) if v is not None else None
                          for v in values]
                found[name] = join(places + ([declared[name]] if name in declared else []))
        self._busy.discard(id(function))
        return found

    def _element(self, iterable: cst.CSTNode) -> str | None:
        """The place of what ``for x in iterable`` binds: a host sequence's items are on the host."""
        if type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value in (
                "range", "enumerate", "zip", "sorted", "reversed"):
            return HOST if iterable.func.value == "range" else None
        return HOST if self.place(iterable) == HOST else None

    def _class_attrs(self, cls: cst.ClassDef) -> dict[str, str | None]:
        found = self._attrs.get(id(cls))
        if found is not None:
            return found
        self._attrs[id(cls)] = found = {}
        if type(cls.body) is not cst.IndentedBlock:
            return found
        values: dict[str, list[str | None]] = {}
        for stmt in cls.body.body:
            if type(stmt) is not cst.FunctionDef:
                continue
            for node in walk(stmt.body, into_scopes=False):
                if type(node) is cst.Call and _registers_buffer(node):
                    # ``self.register_buffer("pos", torch.arange(n))``: a buffer moves with its
                    # module (``model.cuda()``), wherever it was made
                    values.setdefault(node.args[0].value.evaluated_value, []).append(TENSOR)
                    continue
                targets = [t.target for t in node.targets] if type(node) is cst.Assign else \
                    [node.target] if type(node) is cst.AnnAssign and node.value is not None else []
                for t in targets:
                    if type(t) is cst.Attribute and type(t.value) is cst.Name and t.value.value == "self":
                        values.setdefault(t.attr.value, []).append(self.place(node.value))
        for attr, places in values.items():
            found[attr] = join(places)
        return found


def _annotation_text(annotation: cst.BaseExpression) -> str:
    """An annotation as written, ``Optional[X]`` and ``X | None`` read as ``X``, a string as its text."""
    text = cst.Module([]).code_for_node(annotation).strip()
    if type(annotation) is cst.SimpleString and type(annotation.evaluated_value) is str:
        text = annotation.evaluated_value.strip()
    return re.sub(r"^Optional\[(.*)\]$|^(.*?)\s*\|\s*None$", lambda m: m.group(1) or m.group(2), text)


def _registers_buffer(call: cst.Call) -> bool:
    func = call.func
    return type(func) is cst.Attribute and func.attr.value == "register_buffer" and type(func.value) is cst.Name \
        and func.value.value == "self" and bool(call.args) and type(call.args[0].value) is cst.SimpleString \
        and type(call.args[0].value.evaluated_value) is str


def _first_call(outer: cst.FunctionDef, nested: cst.FunctionDef) -> cst.CSTNode:
    """The first statement of ``outer`` that calls ``nested`` by name (when a closure reads the
    names it shares), or its definition when ``outer`` does not call it."""
    for stmt in walk(outer.body, into_scopes=False):
        if isinstance(stmt, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and stmt is not nested and any(
                type(n) is cst.Call and type(n.func) is cst.Name and n.func.value == nested.name.value
                for n in walk(stmt, into_scopes=False)):
            return stmt
    return nested


def _nonlocals(function: cst.FunctionDef) -> set[str]:
    """The names a nested function declares ``nonlocal``: bound in the function around it."""
    return {n.name.value for stmt in walk(function.body, into_scopes=False) if type(stmt) is cst.Nonlocal
            for n in stmt.names}


def _self_attribute(node: cst.CSTNode) -> bool:
    return type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self"


def bound_to_host(model, call: cst.Call) -> bool:
    """Whether the statement around ``call`` binds its result to names marked as the host's
    (``docs_cpu = torch.where(mask)[0]``): for an op that keeps its input's device, the input was
    on the host."""
    for anc in model.ancestors(call):
        if type(anc) in (cst.Assign, cst.AnnAssign):
            targets = [t.target for t in anc.targets] if type(anc) is cst.Assign else [anc.target]
            return any(type(n) is cst.Name and HOST_NAME.search(n.value) for t in targets for n in walk(t))
        if isinstance(anc, (cst.BaseSuite, cst.FunctionDef, cst.Lambda)):
            return False
    return False


class _Element:
    """What a ``for`` target is bound to: an item of ``iter``."""

    __slots__ = ("iter",)

    def __init__(self, iterable: cst.CSTNode) -> None:
        self.iter = iterable


def _bind(target: cst.CSTNode, value, bound: dict[str, list]) -> None:
    if type(target) is cst.Name:
        bound.setdefault(target.value, []).append(value)
    elif type(target) in (cst.Tuple, cst.List):
        items = value.elements if type(value) in (cst.Tuple, cst.List) and len(value.elements) == len(
            target.elements) else None
        for i, el in enumerate(target.elements):
            _bind(el.value, items[i].value if items else None, bound)


def _keyword(call: cst.Call, name: str) -> cst.CSTNode | None:
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def _is_dtype(node: cst.CSTNode) -> bool:
    return type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "torch" \
        or type(node) is cst.Attribute and node.attr.value == "dtype"


def truth_tested(model, node: cst.CSTNode) -> bool:
    """Whether ``node``'s value decides a branch: it is (or is combined by ``and``/``or``/``not``/a
    comparison into) the test of an ``if``, ``while``, ``assert`` or conditional expression."""
    child = node
    for anc in model.ancestors(node):
        kind = type(anc)
        if kind in (cst.If, cst.While):
            return child is anc.test
        if kind is cst.Assert:
            return child is anc.test
        if kind is cst.IfExp:
            return child is anc.test
        if kind not in (cst.BooleanOperation, cst.UnaryOperation, cst.Comparison, cst.ComparisonTarget):
            return False
        child = anc
    return False


DTYPE_NAMES = {"float16", "half", "bfloat16", "float32", "float", "float64", "double", "int8", "uint8", "int16",
                "int32", "int", "int64", "long", "bool", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                "float8_e5m2fnuz", "complex64", "complex128"}
TENSOR_PREDICATES = {"is_contiguous", "is_pinned", "is_nonzero", "is_set_to", "is_shared", "is_coalesced"}
"""Tensor methods that answer a yes/no question: tested without being called, they are a bound
method, which is always true (``torch.dtype`` has no such attributes; ``is_floating_point`` and
``is_signed`` are left out because a dtype has them as properties)."""


def constant_test(model, test: cst.CSTNode) -> str | None:
    """What in a branch test never changes its truth, or None: a tensor predicate tested without
    being called (``b.is_contiguous``), a non-empty tuple (``assert (ok, "msg")``), or a constant
    beside a comparison in an ``or`` (``x.dtype == torch.float16 or torch.bfloat16``)."""
    if type(test) is cst.Tuple and test.elements:
        return "the test is a non-empty tuple, which is always true"
    for node in walk(test, into_scopes=False):
        if type(node) is cst.Attribute and node.attr.value in TENSOR_PREDICATES:
            parent = model.parent(node)
            if not (type(parent) is cst.Call and parent.func is node) and truth_tested(model, node) \
                    and not (type(node.value) is cst.Name and node.value.value in ("self", "cls")):  # a class's own flag
                return f"`{model.dotted(node) or node.attr.value}` is tested without being called, so it is always true"
        if type(node) is cst.BooleanOperation and type(node.operator) is cst.Or:
            sides = (node.left, node.right)
            if any(type(s) is cst.Comparison for s in sides):
                for side in sides:
                    if _truthy_constant(side):
                        return f"`{model.dotted(side) or 'a constant'}` in an `or` is always true"
    return None


def _truthy_constant(node: cst.CSTNode) -> bool:
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "torch" \
            and node.attr.value in DTYPE_NAMES:
        return True
    if type(node) is cst.SimpleString:
        return bool(node.evaluated_value)
    return type(node) is cst.Integer and node.evaluated_value != 0


def reading_sync(model, call: cst.Call) -> str | None:
    """A call that reads a GPU tensor's value on the host by Python's protocols rather than a
    tensor method: ``int(t)``, ``float(t)``, ``bool(t)``, ``max(t)``/``sum(t)`` (which iterate it),
    ``range(t)``, or a GPU tensor (a reduction, a comparison of one) tested by ``if``/``while``/
    ``assert``. None otherwise."""
    places = model.places
    func = call.func
    if type(func) is cst.Name and func.value in READING_BUILTINS and func.value not in model.functions \
            and func.value not in model.imports:
        if any(places.place(a.value) in ON_GPU for a in call.args if a.keyword is None):
            return f"{func.value}() of a GPU tensor"
        return None
    if type(func) is cst.Attribute and func.attr.value in REDUCTIONS and truth_tested(model, call) \
            and places.place(call) in ON_GPU:
        top = call
        for anc in model.ancestors(call):
            if type(anc) in (cst.If, cst.While, cst.Assert, cst.IfExp):
                break
            top = anc
        if places.place(top) in ON_GPU or type(top) is cst.UnaryOperation:
            return f"a branch on .{func.attr.value}() of a GPU tensor"
    return None


def walk(root, into_scopes: bool = True):
    """:func:`kcheck.model.walk` (imported when first used: the model imports this module)."""
    from kcheck.model import walk as model_walk

    return model_walk(root, into_scopes)
