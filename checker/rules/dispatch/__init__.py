"""KC1xx: library dispatch presented as a kernel.

The rules of this family share one question, "what does this kernel claim hand its work to",
answered here from the module model's kernel claims (:mod:`kcheck.claims`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import libcst as cst

from kcheck.contracts import KEEPS
from kcheck.values import FACTORIES, LIKE_FACTORIES
from kcheck.claims import (
    BROAD_FAMILIES, CUDA_LIBRARY, DSL_MODULES, WORKLOAD_CLAIMS, is_solution_file, HEAVY_FAMILIES, LIBRARY_METHODS, LIBRARY_OPS, NEUTRAL_MODULES, Claim, Use, compute_uses, families, is_reference_name, library_family,
)
from kcheck.facts import fact
from kcheck.rules.dispatch.dormant import dormant_test
from kcheck.model import walk
from kcheck.project import custom_op
from kcheck.gate import ast_children, by_name, dotted, import_bindings, reachable, resolve, stack_fields
from kcheck.rule import Rule

CLAIM_NAMES = {"ModelNew", "custom_kernel", "forward_cuda", "custom_op", "register_kernel", "impl",
               "direct_register_custom_op", "register_custom_op"}

# Kernel libraries (not torch): a registered op that calls one integrates a real kernel.
EXTERNAL_KERNELS = re.compile(r"^(flashinfer|flash_attn|xformers|aiter|deep_gemm|flash_mla)(\.|$)")
# A reference solution by its file name (ref.py, reference.py, matmul_ref.py).
REFERENCE_FILE = re.compile(r"^(ref|reference|torch|naive|baseline)(_|$)|_(ref|reference)$", re.I)
# A docstring that opens by calling the function a reference ("Reference kernel for AG-GEMM").
REFERENCE_DOC = re.compile(r"^\W*(a |the )?(naive |pytorch |torch )?reference\b", re.I)
# A leaderboard problem's shipped files (GPU MODE's ``problems/<set>/<name>/``): its sample
# ``submission*.py`` / ``template*.py``, which the problem's task.yml replaces with the contestant's
# file (often the reference itself), and the harness's own ``solutions/correct|wrong/`` cases. Not
# a serving path (KC203); for KC1 a ``submission*.py`` is what it says it is, a submission, and one
# that calls the reference's library op is reported (the dev labels read them so).
SHIPPED_EXAMPLE = re.compile(
    r"(^|/)problems/([^/]+/)*(submission|template)\w*\.py$|(^|/)problems/([^/]+/)*solutions/(correct|wrong)/[^/]+\.py$")
SHIPPED_HARNESS = re.compile(r"(^|/)problems/([^/]+/)*template\w*\.py$|(^|/)problems/([^/]+/)*solutions/(correct|wrong)/[^/]+\.py$")
SUBMISSION_FILE = re.compile(r"(^|/)submission\w*\.py$")


class ClaimRule(Rule):
    """The family's base class: its rules judge kernel claims, so a file must name one of
    ``CLAIM_NAMES`` (or lie on a configured kernel path) before it is parsed for them."""

    # (``getenv|environ``: a kernel package's op whose kernel waits on an opt-in flag, dormant.py)
    # a kernel package's op named as a kernel (``def fast_topk``), or a TODO admitting a missing kernel
    PREFILTER = ("|".join(sorted(CLAIM_NAMES)) + r"|class Model\b|getenv|environ|from \.(naive|reference|ref) import"
                 r"|def (\w+_)?(fused|fuse|fast|kernel|optimi[sz]ed)(_\w*)?\(|(TODO|FIXME|XXX)\b[^\n]*\bkernel",)

    @classmethod
    def prefilter(cls, text: str, config=None, seen: dict | None = None) -> bool:
        return bool(config is not None and config.kernel_paths) or super().prefilter(text, config, seen)


# -- the gates' ast view of claims and launches ------------------------------------------------------
#
# What :mod:`kcheck.claims` finds with libcst, approximated from above over the ``ast`` tree so the
# KC1xx and KC3xx gates can turn away files that hold no claim or no launch. Every test here is
# looser than the one in ``claims.py`` it stands for (functions are matched by name, so every
# definition of a name counts), never stricter.


@dataclass
class AstFacts:
    """One walk's worth of what the claim and fallback gates ask (see :func:`ast_facts`)."""

    aliases: dict[str, str]  # local name -> qualified name, from every import in the file (as the model's table)
    defs: dict[str, list[ast.AST]] = field(default_factory=dict)  # every function definition, by name
    classes: list[ast.ClassDef] = field(default_factory=list)  # every class, nested ones included
    tries: list[tuple[ast.Try, str]] = field(default_factory=list)  # try statements, with the innermost function's name
    matmul: set[str] = field(default_factory=set)  # functions holding a ``@`` anywhere ("<module>": outside any)
    arith: set[str] = field(default_factory=set)  # functions holding ``+ - * / **`` (claims._on_input may find a tensor's)

    def qualname(self, node: ast.AST) -> str | None:
        """``ModuleModel.qualname`` over ``ast``: the dotted name, its head resolved through the imports."""
        return resolve(dotted(node), self.aliases)


_FUNCTION_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)


def ast_facts(summary) -> AstFacts:
    """The imports, definitions, classes, try statements and ``@`` uses of the file, from one walk
    of its ``ast`` (cached in ``summary.memo["dispatch"]``; shared by the KC1xx and KC3xx gates)."""
    facts = summary.memo.get("dispatch")
    if facts is not None:
        return facts
    facts = AstFacts({})
    aliases, defs, classes, tries, matmul = facts.aliases, facts.defs, facts.classes, facts.tries, facts.matmul
    stack: list[tuple[ast.AST, tuple[str, ...]]] = [(summary.tree, ())] if summary.tree is not None else []
    while stack:
        node, enclosing = stack.pop()
        kind = type(node)
        if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            defs.setdefault(node.name, []).append(node)
            enclosing = (*enclosing, node.name)
        elif kind is ast.ClassDef:
            classes.append(node)
        elif kind is ast.Try:
            if enclosing:
                tries.append((node, enclosing[-1]))
        elif kind is ast.BinOp:
            if type(node.op) is ast.MatMult:
                matmul.update(enclosing or ("<module>",))
            elif type(node.op) in _ARITH:
                facts.arith.update(enclosing or ("<module>",))
        elif kind is ast.Import or kind is ast.ImportFrom:
            aliases.update(import_bindings(node))
            continue
        elif kind is ast.Name or kind is ast.Constant:
            continue
        # children pushed in reverse: a pre-order walk in source order, so that a name imported twice
        # resolves to its last import, as in the model's table
        for name in stack_fields(kind):
            value = getattr(node, name, None)
            if type(value) is list:
                stack.extend([(v, enclosing) for v in reversed(value) if v is not None and type(v) is not str])
            elif value is not None:
                stack.append((value, enclosing))
    summary.memo["dispatch"] = facts
    return facts


@dataclass
class Analysis:
    claim: Claim
    library: list[Use]  # library ops the baseline also uses (all of them when no baseline is known)
    launches: list[Use]
    unknown: list[Use]  # calls this file cannot see into: they may be the real kernel
    dormant: list[tuple[Use, cst.CSTNode]] = field(default_factory=list)  # launches kept from running by default, with the test




def _inputs(model, claim: Claim, node: cst.CSTNode) -> frozenset[str]:
    """The names that hold a solution's input tensors where ``node`` runs: the parameters of the
    claim and of the function around ``node`` (not ``self``/``ctx``); none outside a solution."""
    if claim.kind not in WORKLOAD_CLAIMS:
        return frozenset()
    names = set()
    for fn in (claim.function, model.enclosing_function(node)):
        if fn is not None:
            names |= {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)}
    return frozenset(names - {"self", "ctx", "cls"})


def _opaque(model, uses: list[Use]) -> list[Use]:
    """The calls the claim's work may go to that this file cannot see into, less those made in a
    branch test (``if _is_device("cpu", x):``, ``if supports_fp8():``): a predicate picks a path,
    it does not do the path's work."""
    out = []
    for u in uses:
        if u.kind != "unknown":
            continue
        child, in_test = u.node, False
        for anc in model.ancestors(u.node):
            if type(anc) in (cst.If, cst.IfExp, cst.While) and child is anc.test:
                in_test = True
                break
            if type(anc) in (cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine):
                break
            child = anc
        if not in_test:
            out.append(u)
    return out


def _split_dormant(model, claim: Claim, launches: list[Use]) -> tuple[list[Use], list[tuple[Use, cst.CSTNode]]]:
    """The launches that run by default, and those a test keeps from running (with that test)."""
    live, dormant = [], []
    for use in launches:
        test = None
        for node in (use.node, use.via):
            if node is not None and test is None:
                test = dormant_test(model, node, _inputs(model, claim, node))
        (dormant.append((use, test)) if test is not None else live.append(use))
    return live, dormant


# A registered op's name that presents it as a kernel of its own ("fused_qkv", "fast_topk").
PRESENTED_AS_KERNEL = re.compile(r"(^|[_:.])(fused|fuse|fast|kernel|optimi[sz]ed)([_:.]|$)", re.I)


def _presented_as_kernel(fn: cst.FunctionDef) -> bool:
    """Whether a registered op says it is a kernel: by its function's name or the op name its
    registering decorator gives (``@custom_op("demo::fused_qkv")``)."""
    names = [fn.name.value]
    for dec in fn.decorators:
        if type(dec.decorator) is cst.Call:
            names += [a.value.evaluated_value for a in dec.decorator.args
                      if type(a.value) is cst.SimpleString and isinstance(a.value.evaluated_value, str)]
    return any(PRESENTED_AS_KERNEL.search(n) for n in names)


# A module of a package that says it holds kernels (``torchao/kernel/``, ``sgl_kernel/``, ``ops/kernels/``).
KERNEL_PACKAGE = re.compile(r"(^|/)(kernels?|\w+_kernels?)/([^/]+/)*[^/]+\.py$")


def _package_exports(model) -> list[cst.FunctionDef]:
    """The public module-level functions of a kernel package's module (not its Triton kernels): ops
    the package presents as kernels by where they live."""
    if not KERNEL_PACKAGE.search(model.path):
        return []
    module = getattr(model, "_claim_module", None)
    return [s for s in (module.body if module is not None else ()) if type(s) is cst.FunctionDef
            and not s.name.value.startswith("_") and s not in model.triton_kernels and s not in model.dsl_kernels and not is_reference_name(s.name.value)]


# A comment admitting that the kernel a function stands for is not written yet
# ("TODO: implement the CUDA kernel for NewGELU", "TODO: faster cuda kernels for large vocab").
MISSING_KERNEL = re.compile(r"#[^\n]*\b(TODO|FIXME|XXX)\b[^\n]*\bkernels?\b", re.I)


def admits_missing_kernel(model, fn: cst.FunctionDef) -> bool:
    """Whether ``fn``'s own code carries a comment saying its kernel is still to be written."""
    return bool(MISSING_KERNEL.search(cst.Module([]).code_for_node(fn)))


def _delegates(fn: cst.FunctionDef, target: cst.FunctionDef) -> cst.Call | None:
    """The call ``self.<target name>(...)`` in ``fn``, if any."""
    name = target.name.value
    return next((n for n in walk(fn.body) if type(n) is cst.Call and type(n.func) is cst.Attribute
                 and n.func.attr.value == name and type(n.func.value) is cst.Name and n.func.value.value == "self"), None)


# An ops or kernel package (``fla/ops/titans/``, ``torchao/kernel/``), and the import of its
# pure-torch module (``from .naive import chunk_titans_linear``).
OPS_PACKAGE = re.compile(r"(^|/)(ops|kernels?|\w+_kernels?)/([^/]+/)*__init__\.py$")
NAIVE_IMPORT = re.compile(r"from \.(naive|reference|ref) import")
_NAIVE_MODULES = ("naive", "reference", "ref")


def naive_exports(model) -> list[tuple[cst.CSTNode, str, str]]:
    """(statement, name, module) for each function an ops package's ``__init__`` exports from its
    pure-torch module (``naive.py``, ``reference.py``) under a name that does not say so
    (``chunk_titans_linear``, not ``naive_chunk_titans``): the package presents the reference
    implementation as one of its kernel ops. Only names in ``__all__`` count when it is given."""
    if not (model.path.endswith("__init__.py") and OPS_PACKAGE.search(model.path)):
        return []
    module = getattr(model, "_claim_module", None)
    if module is None:
        return []
    exported: set[str] | None = None
    imports = []
    for stmt in module.body:
        if type(stmt) is not cst.SimpleStatementLine:
            continue
        for small in stmt.body:
            if type(small) is cst.ImportFrom and len(small.relative) == 1 and type(small.module) is cst.Name \
                    and small.module.value in _NAIVE_MODULES and type(small.names) is not cst.ImportStar:
                imports += [(stmt, (a.asname.name.value if a.asname else a.name.value), small.module.value)
                            for a in small.names if type(a.name) is cst.Name]
            elif type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name \
                    and small.targets[0].target.value == "__all__" and type(small.value) in (cst.List, cst.Tuple):
                exported = {e.value.evaluated_value for e in small.value.elements
                            if type(e.value) is cst.SimpleString and isinstance(e.value.evaluated_value, str)}
    return [(stmt, name, mod) for stmt, name, mod in imports
            if name[:1].islower() and not is_reference_name(name) and "naive" not in name.lower()
            and (exported is None or name in exported)]


def analyse(model) -> list[Analysis]:
    """Each kernel claim with what its compute path hands work to (cached on the model)."""
    cached = getattr(model, "_dispatch_analysis", None)
    if cached is not None:
        return cached
    out = []
    if REFERENCE_FILE.search(PurePosixPath(model.path).stem):
        model._dispatch_analysis = out
        return out  # ref.py, reference.py: the reference solution, not a claim
    if SHIPPED_HARNESS.search(model.path):
        model._dispatch_analysis = out
        return out  # a leaderboard problem's template or harness case, not a contestant's claim
    submission = bool(SUBMISSION_FILE.search(model.path))
    solution = submission or "ModelNew" in model.classes or is_solution_file(model.path, False) or (
        bool(model.config.kernel_paths) and model.config.is_kernel_path(model.path))
    for claim in model.kernel_claims:
        if claim.kind == "custom-op-class":
            # a CustomOp's forward_cuda is the CUDA slot of a layer, not a kernel submission, unless
            # the slot itself admits that the kernel it stands for was never written
            if admits_missing_kernel(model, claim.function):
                uses = compute_uses(model, claim.function, claim.attrs)
                call = _delegates(claim.function, claim.baseline) if not uses and claim.baseline is not None else None
                if call is not None:  # ``return self.forward_native(x)``: the slot runs the native formula
                    uses = compute_uses(model, claim.baseline, claim.baseline_attrs)
                    for u in uses:
                        u.via = call
                out.append(Analysis(claim, [u for u in uses if u.kind == "library"],
                                    [u for u in uses if u.kind == "launch"], _opaque(model, uses)))
            continue
        if claim.kind == "custom-op" and not solution and not _presented_as_kernel(claim.function):
            continue  # a library's registered op binds work for torch.compile, sharding or fakes
        if not submission and REFERENCE_DOC.search(claim.function.get_docstring() or ""):
            continue  # "Reference kernel for ...": a problem's sample submission says what it is
        uses = compute_uses(model, claim.function, claim.attrs)
        library = [u for u in uses if u.kind == "library"]
        if not library and claim.kind in WORKLOAD_CLAIMS and not any(u.kind in ("launch", "unknown") for u in uses):
            # a solution whose only work is arithmetic on its inputs (``A * s`` in an autograd
            # Function presented as a custom operator) runs ATen's elementwise kernels
            library = [u for u in uses if u.kind == "elementwise"][:1]
        if claim.kind == "custom-op":
            # a registered op around FlashInfer or flash-attn exposes a real kernel to torch.compile,
            # and one around plain torch reductions or activations is an integration point
            library = [u for u in library if not EXTERNAL_KERNELS.match(u.name) and u.family not in BROAD_FAMILIES]
        if claim.baseline is not None:
            base = families(compute_uses(model, claim.baseline, claim.baseline_attrs))
            library = [u for u in library if u.family == "baseline" or u.family in base]
        launches, dormant = _split_dormant(model, claim, [u for u in uses if u.kind == "launch"])
        out.append(Analysis(claim, library, launches, _opaque(model, uses), dormant))
    claimed = {id(c.function) for c in model.kernel_claims}
    for fn in _package_exports(model):
        if id(fn) in claimed:
            continue
        claim = Claim("kernel-package", f"{fn.name.value} (a kernel package's op)", fn)
        uses = compute_uses(model, fn, {})
        launches, dormant = _split_dormant(model, claim, [u for u in uses if u.kind == "launch"])
        if dormant and not launches:  # only its dormant kernels make it a claim (KC102)
            out.append(Analysis(claim, [u for u in uses if u.kind == "library"], launches, _opaque(model, uses), dormant))
        elif not launches and not dormant and (fn.name.value.startswith("fast_") or admits_missing_kernel(model, fn)):
            # named as a faster kernel of its own (``fast_topk``) by a package of kernels, or
            # admitting the kernel is missing: its library ops are the claim's work (KC101). A
            # ``fused_*`` op of a package may fuse through the library (an affine folded into
            # ``F.layer_norm``), and an op around a third-party kernel library binds that kernel.
            library = [u for u in uses if u.kind == "library" and not EXTERNAL_KERNELS.match(u.name)
                       and u.family != "kernel-library"]
            out.append(Analysis(claim, library, [], _opaque(model, uses)))
    model._dispatch_analysis = out
    return out


def main_use(library: list[Use], model=None) -> Use:
    """The library op a finding names: a heavy one (GEMM, attention, convolution) before the rest,
    and among those first one that an extension presented as the kernel calls in its own C++
    (``torch::conv2d`` inside ``conv_relu_cuda``), where the claim hides the library's work. Then
    the one on the claim's main path: a call in the claim's own body before one inside a helper it
    calls (a warm-up or timing helper), and neither under a CPU guard (``if not x.is_cuda:``) nor in
    an ``except`` handler, which are fallbacks; among equals, the one a CUDA graph captures (what
    its replays run) before a warm-up call of it."""
    heavy = [u for u in library if u.family in HEAVY_FAMILIES] or library
    inside = next((u for u in heavy if " in the extension " in u.name), None)
    if inside is not None or model is None:
        return inside or heavy[0]
    return min(heavy, key=lambda u: (_fallback_branch(model, u.via or u.node), u.via is not None,
                                     not _in_graph_capture(model, u.node)))


# How many other places of heavy library work a finding points at besides the one it names.
MORE_WORK_SITES = 6


def other_work_sites(library: list[Use], chosen: Use, model) -> tuple:
    """(node, note) for the other heavy library calls (GEMM, attention, convolution) on the claim's
    main path, in source order and one per call site, none in a fallback branch: where else the
    library does the work the claim presents as its own (a ResNet's every bottleneck convolution,
    each chunk GEMM of a linear-attention forward), so that the finding shows the work, not one
    sample of it. At most :data:`MORE_WORK_SITES`."""
    out, seen = [], {id(chosen.node)}
    for u in library:
        if u.family not in HEAVY_FAMILIES or id(u.node) in seen or _fallback_branch(model, u.node):
            continue
        seen.add(id(u.node))
        out.append((u.node, f"{u.name if u.name.startswith(('@', '.', 'the ')) else u.name + '()'} also does the work here"))
        if len(out) >= MORE_WORK_SITES:
            break
    return tuple(out)


def _in_graph_capture(model, node: cst.CSTNode) -> bool:
    """Whether ``node`` is captured in a CUDA graph (``with torch.cuda.graph(g):``): what replays."""
    return any(type(a) is cst.With and any(type(i.item) is cst.Call and (model.call_name(i.item) or "") == "torch.cuda.graph"
                                           for i in a.items) for a in model.ancestors(node))


# A branch test that holds only off the GPU: ``not x.is_cuda``, ``x.device.type == "cpu"``,
# ``not torch.cuda.is_available()``.
_OFF_GPU = re.compile(r"\bnot\s+[\w.]*(is_cuda|cuda\.is_available\(\))|device(\.type)?\s*==\s*['\"]cpu|['\"]cpu['\"]\s*=="
                     r"|^[\w.]*is_cpu$|^[\w.]*_device\(\s*['\"]cpu['\"]")
_ON_GPU = re.compile(r"^[\w.]*(\.is_cuda|cuda\.is_available\(\))$")


def _fallback_branch(model, node: cst.CSTNode) -> bool:
    """Whether ``node`` lies in an ``except`` handler or in the branch of an ``if`` taken off the GPU."""
    child = node
    for anc in model.ancestors(node):
        if type(anc) in (cst.FunctionDef, cst.ClassDef):
            return False
        if type(anc) is cst.ExceptHandler:
            return True
        if type(anc) is cst.If and child is not anc.test:
            test = cst.Module([]).code_for_node(anc.test).strip()
            if child is anc.body and _OFF_GPU.search(test):
                return True
            if child is anc.orelse and _ON_GPU.match(test):
                return True
        child = anc
    return False


# -- the family's facts (kcheck.facts), over the ast ----------------------------------------------------

# Last components of the library ops (``torch.nn.functional.linear`` -> ``linear``), the tensor
# methods that are the same ops, and the pattern prefixes (``torch.nn.Conv*``).
LIBRARY_LAST = frozenset({k.rsplit(".", 1)[-1] for k in LIBRARY_OPS if "*" not in k} | set(LIBRARY_METHODS))
LIBRARY_PREFIXES = ("conv", "Conv", "linalg", "cholesky", "binary_cross_entropy", "max_pool", "avg_pool",
                    "adaptive_")  # the patterns of LIBRARY_OPS, by the name they start with
LIBRARY_SUFFIXES = ("_loss", "Loss", "Pool1d", "Pool2d", "Pool3d", "pool1d", "pool2d", "pool3d")
TRITON_LAST = {"jit", "autotune", "heuristics"}
DSL_LAST = {"kernel", "jit", "prim_func"}  # the last components of project.DSL_DECORATORS
REGISTERING = {"custom_op", "register_kernel", "impl"}  # last components of registering decorators
EXTENSION_BUILDERS = {"load_inline", "load"}


def _library_aliases(facts: AstFacts) -> set[str]:
    """Imported names that are a library op or a module all of whose functions are (``flash_attn``,
    ``torch.ops.aten``): ``from torch import matmul as mm``, ``from flash_attn import flash_attn_func``."""
    out = set()
    for local, qualified in facts.aliases.items():
        family = library_family(qualified) or library_family(qualified + ".x")
        if family:
            out.add(local)
    return out


def _names_library_op(names: set[str], aliases: set[str]) -> bool:
    inplace = {n[:-1] for n in names if n.endswith("_") and not n.endswith("__")}  # ``relu_``: the op in place
    return bool(names & LIBRARY_LAST or inplace & LIBRARY_LAST or names & aliases or "aten" in names
                or any(n.startswith(LIBRARY_PREFIXES) or n.endswith(LIBRARY_SUFFIXES) for n in names))


def _decorator_names(facts: AstFacts, fn: ast.AST) -> list[str]:
    """Each decorator's qualified name and its last component (both, to stay loose)."""
    out = []
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = facts.qualname(target) or ""
        out += [name, name.split(".")[-1], (dotted(target) or "").split(".")[-1]]
    return out


def _claims(summary, config) -> tuple[set[str], bool, list[ast.AST]] | None:
    """The functions that can be KC1xx kernel claims KC101 or KC102 may report, by name, whether a
    ``ModelNew`` is one of them, and their definitions; None when every function may be one (a
    configured kernel path).

    Mirrors :func:`kcheck.claims._find_kernel_claims` minus the ``forward_cuda`` of a ``CustomOp``,
    which :func:`analyse` skips: a ``ModelNew`` with a ``forward``, a function registered by a
    decorator (``custom_op``, ``register_kernel``, ``impl(...)``) or by a call (``lib.impl("op", fn)``,
    ``direct_register_custom_op(op_func=fn)``), a ``custom_kernel``. A claim whose own body surely
    calls something both rules give up on (:func:`_opaque_call`) is left out."""
    cached = summary.memo.get("dispatch_claims")
    if cached is not None:
        return cached[0]
    if config.kernel_paths and config.is_kernel_path(summary.path):
        summary.memo["dispatch_claims"] = (None,)
        return None
    claims: list[ast.AST] = []
    model_new: list[ast.AST] = []
    if "ModelNew" in summary.class_names:
        for cls in ast_facts(summary).classes:
            if cls.name == "ModelNew":
                model_new += [s for s in cls.body if isinstance(s, _FUNCTION_DEFS) and s.name == "forward"]
    elif "Model" in summary.class_names and is_solution_file(summary.path, _authors_kernel(summary)):
        for cls in ast_facts(summary).classes:
            if cls.name == "Model":
                model_new += [s for s in cls.body if isinstance(s, _FUNCTION_DEFS) and s.name == "forward"]
    # a registering decorator, written as such or imported under another name (``custom_op as co``)
    if any(f.decorators & REGISTERING for f in summary.functions) or any(
        i.rsplit(".", 1)[-1] in REGISTERING for i in summary.imports
    ):
        facts = ast_facts(summary)
        claims += [fn for fns in facts.defs.values() for fn in fns if REGISTERING & set(_decorator_names(facts, fn))]
    registered = {"custom_kernel"} & summary.function_names()
    local = summary.function_names()
    for stmt in summary.tree.body:  # custom_kernel = torch.compile(impl)
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id == "custom_kernel" and isinstance(stmt.value, ast.Call) and stmt.value.args
                and isinstance(stmt.value.args[0], ast.Name) and stmt.value.args[0].id in local):
            registered.add(stmt.value.args[0].id)
    for call, _ in summary.calls:  # lib.impl("op", fn, "CUDA"), direct_register_custom_op("op", fn) or op_func=fn
        last = _last_name(call.func)
        if last == "impl" or last.endswith("register_custom_op"):
            registered |= {a.id for a in [*call.args[1:], *(k.value for k in call.keywords)]
                           if isinstance(a, ast.Name) and a.id in local}
    if registered:
        claims += [fn for name in registered for fn in ast_facts(summary).defs.get(name, ())]
    if summary.source is not None and MISSING_KERNEL.search(summary.source):  # a CUDA slot admitting its kernel is missing
        claims += [fn for cls in ast_facts(summary).classes for fn in cls.body
                   if isinstance(fn, _FUNCTION_DEFS) and fn.name == "forward_cuda"]
    if KERNEL_PACKAGE.search(summary.path):  # _package_exports: a kernel package's public functions
        claims += [s for s in summary.tree.body if isinstance(s, _FUNCTION_DEFS) and not s.name.startswith("_")]
    if SUBMISSION_FILE.search(summary.path):  # claims.SUBMISSION_ENTRY_FILE: its public functions may be claims
        claims += [s for s in summary.tree.body if isinstance(s, _FUNCTION_DEFS) and not s.name.startswith("_")]
    live = model_new + claims
    if live and not config.library_ops:
        facts = ast_facts(summary)
        dormancy = summary.source is not None and bool(_DORMANCY.search(summary.source))
        live = [fn for fn in live if not any(_opaque_call(summary, facts, c, dormancy) for c in _claim_calls(facts, fn))]
    live = [fn for fn in live if not is_reference_name(fn.name)]
    result = ({fn.name for fn in live}, any(fn in live for fn in model_new), live)
    summary.memo["dispatch_claims"] = (result,)
    return result


def _authors_kernel(summary) -> bool:
    """Whether the file may build an extension or define a Triton kernel (looser than the model's
    ``extensions or triton_kernels``: any call named ``load_inline``/``load``, any ``jit``-like decorator)."""
    facts = ast_facts(summary)
    return any(_builds_extension(facts, c) for c, _ in summary.calls) or any(
        (TRITON_LAST | DSL_LAST) & set(_decorator_names(facts, fn)) for fns in facts.defs.values() for fn in fns)


def _own_calls(fn: ast.AST):
    """The calls in a function's body outside nested functions, classes and lambdas (what
    :func:`kcheck.claims.compute_uses` reads of the claim itself)."""
    stack = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            yield node
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):  # a branch test's calls pick a path (:func:`_opaque`)
            stack.extend(c for c in ast_children(node) if c is not node.test)
            continue
        stack.extend(ast_children(node))


def _claim_calls(facts: AstFacts, fn: ast.AST):
    """The calls :func:`kcheck.claims.compute_uses` surely classifies for a claim: those of its own
    body and of each helper it calls by a bare name that only one function of the file has (the one
    ``ModelNew.callee`` resolves; its body is always read, one call deep)."""
    for call in _own_calls(fn):
        yield call
        func = call.func
        if isinstance(func, ast.Name) and func.id not in facts.aliases and not _skip(func.id):
            helpers = facts.defs.get(func.id, ())
            if len(helpers) == 1 and helpers[0] is not fn:
                yield from _own_calls(helpers[0])


def _opaque_call(summary, facts: AstFacts, call: ast.Call, dormancy: bool = False) -> bool:
    """Whether :func:`kcheck.claims.classify_call` surely makes ``call`` an ``unknown`` use or a
    launch that is no side job, either of which stops KC101 and KC102 for the claim: a call through
    an imported name (not ``self``) that is no library op, into a module outside
    :data:`NEUTRAL_MODULES` or into ``torch.ops.<namespace>`` (``aiter.fused_moe(...)``,
    ``ops.rms_norm(...)`` from ``_custom_ops``). It is not followed as a same-module helper: the
    model resolves an imported name to the import."""
    raw = dotted(call.func)
    if raw is None or "()" in raw:
        return False
    head = raw.split(".")[0]
    if head not in facts.aliases:
        return False  # a local name may be a layer the model follows (``for block in self.blocks: block(x)``)
    if head in ("self", "cls"):
        return False
    name = facts.qualname(call.func) or ""
    if library_family(name):
        return False
    parts = name.split(".")
    if parts[0] in DSL_MODULES:
        return False  # a kernel DSL's build or interop call: plumbing beside the file's own DSL kernels
    if parts[0] not in NEUTRAL_MODULES:
        return True
    # a ``torch.ops`` kernel is a launch, which may wait on an opt-in test (``dormancy``: dormant.py)
    return custom_op(name) and not dormancy


def _builds_extension(facts: AstFacts, call: ast.Call) -> bool:
    """A call that may be ``torch.utils.cpp_extension.load_inline``/``load`` (under any import name)."""
    return _last_name(call.func) in EXTENSION_BUILDERS or (
        (facts.qualname(call.func) or "").split(".")[-1] in EXTENSION_BUILDERS)


def _last_name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _skip(name: str) -> bool:
    return is_reference_name(name) or name == "forward_native"


@fact("claim reaches library")
def claim_reaches_library(summary, config) -> bool:
    """Whether a file holds a kernel claim whose compute path (the claim and the same-module
    functions it names, three calls deep) can reach a library op: a name of one (``matmul``,
    ``linear``, ``conv2d``, ``aten``, an import of ``flash_attn``), a ``@``, or, for a ``ModelNew``,
    an ``nn.Linear``-style attribute anywhere in the file or the baseline ``Model()``. Reference
    files and a leaderboard problem's shipped files hold no claim :func:`analyse` looks at."""
    if REFERENCE_FILE.search(PurePosixPath(summary.path).stem) or SHIPPED_HARNESS.search(summary.path):
        return False
    if summary.path.endswith("__init__.py") and OPS_PACKAGE.search(summary.path) and NAIVE_IMPORT.search(summary.source or ""):
        return True  # an ops package re-exporting its pure-torch module (naive_exports)
    claims = _claims(summary, config)
    if claims is None:
        return True
    names, model_new, live = claims
    if not names:
        return False
    if config.library_ops:
        return True  # configured library ops may have any name
    if "forward_cuda" in names and MISSING_KERNEL.search(summary.source or ""):
        return True  # a CUDA slot that admits its kernel is missing may run forward_native's torch ops
    if summary.source is not None and CUDA_LIBRARY.search(summary.source):
        return True  # an extension's source may call cuBLAS or ATen in place of a kernel
    facts = ast_facts(summary)
    aliases = _library_aliases(facts)
    if model_new and (_names_library_op(summary.all_names, aliases) or facts.matmul or facts.arith or any(
        isinstance(c.func, ast.Name) and (c.func.id == "Model" or c.func.id in summary.class_names)
        for c, _ in summary.calls  # the baseline, or a layer class of the file (its forward is followed)
    )):
        return True  # attributes bound in __init__ (self.fc = nn.Linear(...)) count for forward
    path = reachable(summary, names, 3, _skip)
    if path & facts.matmul or path & facts.arith and (
            "custom_kernel" in (summary.source or "") or SUBMISSION_FILE.search(summary.path)):
        return True  # a ``@``; or for a leaderboard entry, arithmetic on its inputs (an elementwise solution)
    functions = by_name(summary)
    if any(f.names & summary.class_names for n in path for f in functions[n]) and (
            _names_library_op(summary.all_names, aliases) or facts.matmul):
        return True  # a module class of the file built and called on the path (claims._instance_of)
    return any(_names_library_op(f.names, aliases) for n in path for f in functions[n])


_DORMANCY = re.compile(r"getenv|environ|requires_grad")


@fact("claim launches kernel")
def claim_launches_kernel(summary, config) -> bool:
    """Whether a claim can launch a kernel of its own (one that may run only on a side path): a Triton
    launch ``kernel[grid](...)`` of a ``@triton.jit`` function of this file, in a function the claim
    reaches, or an extension built at module level with ``load_inline``/``load`` (only these carry
    the ``side_job`` mark; :func:`kcheck.claims._find_launches`)."""
    claims = _claims(summary, config)
    if claims is None:
        return True
    if claims[0] and summary.source is not None and _DORMANCY.search(summary.source):
        return True  # a kernel of any kind may wait on an opt-in flag or on inputs requiring grad (dormant.py)
    facts = ast_facts(summary)
    if any(_builds_extension(facts, c) for c, _ in summary.calls):
        return True  # an extension built at module level, in a lazy builder or in a method
    if any(DSL_LAST & set(_decorator_names(facts, fn)) and any(
            n.startswith(DSL_MODULES) for n in _decorator_names(facts, fn)) for fns in facts.defs.values() for fn in fns):
        return True  # a CuTe DSL, TileLang, Numba or Helion kernel (claims._dsl_launched follows its callables)
    kernels = {name for name, fns in facts.defs.items()
               if any(TRITON_LAST & set(_decorator_names(facts, fn)) for fn in fns)}
    if not kernels:
        return False
    path = reachable(summary, claims[0], 3, _skip)
    return any(isinstance(c.func, ast.Subscript) and isinstance(c.func.value, ast.Name) and c.func.value.id in kernels
               and f is not None and f.name in path for c, f in summary.calls)


# -- does a launch's output reach what the claim returns -------------------------------------------

# Methods and functions whose result may share the storage of the tensor they read: the methods
# that keep a caller's argument (``contracts.KEEPS``: a copy among them, ``.float()``, only makes
# the walk more cautious), views, and the DSLs' layout wrappers (``from_dlpack(out)``).
ALIAS_METHODS = KEEPS | {"view_as", "T", "mT", "expand_as", "narrow", "as_strided", "unflatten", "data", "cuda",
                         "mark_layout_dynamic", "mark_compact_shape_dynamic"}
ALIAS_FUNCTIONS = {"from_dlpack", "as_tensor", "to_dlpack", "make_ptr"}
# Calls that allocate a tensor from sizes or another's shape, not from its values: the values
# model's factories less those that copy data in, and the ``new_*`` methods.
ALLOCATORS = (FACTORIES - {"tensor", "as_tensor", "from_numpy"}) | LIKE_FACTORIES | {
    "new_empty", "new_zeros", "new_ones", "new_full"}


def discarded_launches(model, fn: cst.FunctionDef, launches: list[Use], library: list[Use]) -> Use | None:
    """The library op whose result ``fn`` returns while nothing its kernels wrote reaches it, or
    None. A flow-sensitive walk of ``fn``'s own statements in order (:class:`_Flow`): a launch may
    write every buffer it is passed and every tensor those share storage with (a view,
    ``from_dlpack``); a value computed after that from such a buffer carries the kernel's output.
    When what ``fn`` returns carries none, and came from a library op, the kernel wrote a buffer
    nobody reads (``output = F.linear(x, w)`` rebinding the name whose storage the CuTe kernel was
    given, or a kernel result assigned to ``_``): the result is the library's."""
    flow = _Flow(model, {id(u.node) for u in launches}, {id(u.node): u for u in library})
    flow.visit(fn.body.body if type(fn.body) is cst.IndentedBlock else [], False)
    returned = flow.defs.get("<return>", set())
    if not returned or flow.carries(returned) or not all(d in flow.made_by for d in returned):
        return None
    return flow.made_by[min(returned)]


class _Flow:
    """The state of :func:`discarded_launches`' walk (a class, not closures: no reference cycles)."""

    def __init__(self, model, launched: set[int], ops: dict[int, Use]) -> None:
        self.dotted = model.dotted
        self.launched, self.ops, self.modules = launched, ops, set(model.imports)
        self.defs: dict[str, set[int]] = {}  # variable -> its definitions that may hold here
        self.shares: dict[int, set[int]] = {}  # definition -> those it may share storage with (itself too)
        self.written: set[int] = set()  # definitions a launch may have written
        self.made_by: dict[int, Use] = {}  # definition -> the library op its value came from

    def new(self, alias=()) -> int:
        d = len(self.shares) + 1
        self.shares[d] = {d, *alias}
        return d

    def variable(self, target) -> str | None:
        if type(target) is cst.Name:
            return target.value if target.value not in self.modules else None
        if type(target) is cst.Attribute and type(target.value) is cst.Name and target.value.value == "self":
            return f"self.{target.attr.value}"  # a module keeps state there
        return None

    def now(self, name: str) -> set[int]:
        """The definitions of ``name`` here; a parameter, a global or ``self.x`` gets one on first read."""
        if name not in self.defs:
            self.defs[name] = {self.new()}
        return self.defs[name]

    def reads(self, expr) -> list[int]:
        out, skip = [], set()
        for n in walk(expr):
            if type(n) is cst.Attribute:
                skip.add(id(n.attr))
                if (name := self.variable(n)) is not None:
                    skip.add(id(n.value))
                    out.extend(self.now(name))
            elif type(n) is cst.Name and id(n) not in skip and (name := self.variable(n)) is not None:
                out.extend(self.now(name))
        return out

    def allocates(self, expr) -> bool:
        return type(expr) is cst.Call and (self.dotted(expr.func) or "").split(".")[-1] in ALLOCATORS

    def holds_launch(self, expr) -> bool:
        return any(id(n) in self.launched for n in walk(expr) if type(n) is cst.Call)

    def carries(self, ds) -> bool:
        return any(self.shares.get(d, {d}) & self.written for d in ds)

    def source(self, expr) -> str | None:
        """The variable whose storage ``expr`` shares (``out``, ``out[0]``, ``out.view(-1)``, ``from_dlpack(out)``)."""
        while True:
            kind = type(expr)
            if kind is cst.Name or self.variable(expr) is not None:
                return self.variable(expr)
            if kind is cst.Subscript or (kind is cst.Attribute and expr.attr.value in ALIAS_METHODS):
                expr = expr.value
            elif kind is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in ALIAS_METHODS:
                expr = expr.func.value
            elif kind is cst.Call and (self.dotted(expr.func) or "").split(".")[-1] in ALIAS_FUNCTIONS and expr.args:
                expr = expr.args[0].value
            else:
                return None

    def bind(self, target, value, branch: bool) -> None:
        if type(target) in (cst.Tuple, cst.List):  # ``a, b = f(x)``: each part comes from the whole value
            for element in target.elements:
                self.bind(element.value, value, branch)
            return
        name = target if type(target) is str else self.variable(target)
        sources = self.reads(value)
        if name is None:  # ``out[i] = v``: a write into ``out``'s storage
            root = self.source(target)
            if root is not None and (self.holds_launch(value) or self.carries(sources)):
                for e in self.now(root):
                    self.written.update(self.shares.get(e, {e}))
            return
        alias = self.source(value)
        fresh = type(value) in (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison) or (
            type(value) is cst.Call and alias is None)  # an op's result: new storage
        shared = self.now(alias) if alias else () if fresh else sources  # (a list of views shares them all)
        d = self.new({s for e in shared for s in self.shares.get(e, {e})})
        if self.holds_launch(value) or self.carries(sources):
            self.written.add(d)
        op = next((self.ops[id(n)] for n in walk(value) if id(n) in self.ops), None)
        if op is None and not self.allocates(value):  # ``torch.empty_like(y)`` takes y's shape, not its values
            op = next((self.made_by[e] for e in sources if e in self.made_by), None)
        if op is not None:
            self.made_by[d] = op
        self.defs[name] = (self.defs.get(name, set()) | {d}) if branch else {d}

    def launch(self, node) -> None:
        for call in (n for n in walk(node) if type(n) is cst.Call and id(n) in self.launched):
            for arg in call.args:
                for e in self.reads(arg.value):
                    self.written.update(self.shares.get(e, {e}))

    def visit(self, body, branch: bool) -> None:
        for stmt in body:
            kind = type(stmt)
            if kind is cst.SimpleStatementLine:
                for small in stmt.body:
                    self.launch(small)
                    if type(small) is cst.Assign:
                        for t in small.targets:
                            self.bind(t.target, small.value, branch)
                    elif type(small) is cst.AnnAssign and small.value is not None:
                        self.bind(small.target, small.value, branch)
                    elif type(small) is cst.AugAssign and (name := self.variable(small.target)) is not None:
                        if self.carries(self.reads(small.value)) or self.holds_launch(small.value):
                            self.written.update(self.now(name))
                    elif type(small) is cst.Return and small.value is not None:
                        self.bind("<return>", small.value, True)
            elif kind not in (cst.FunctionDef, cst.ClassDef):  # its test first, then blocks that may or may not run
                for header in _headers(stmt):
                    self.launch(header)
                for part in _blocks(stmt):
                    self.visit(part, True)


def _blocks(stmt) -> list:
    """The statement lists inside a compound statement (``if``/``else``, loop bodies, ``try`` and
    its handlers, ``with``)."""
    out = []
    for name in ("body", "orelse", "finalbody"):
        part = getattr(stmt, name, None)
        if part is None:
            continue
        if type(part) in (cst.Else, cst.Finally):
            part = part.body
        elif type(part) is cst.If:  # ``elif``
            out.extend(_blocks(part))
            continue
        if type(part) is cst.IndentedBlock:
            out.append(part.body)
    for handler in getattr(stmt, "handlers", ()):
        out.append(handler.body.body)
    return out


def _headers(stmt) -> list:
    """The expressions a compound statement evaluates before its blocks (a test, an iterable, a context)."""
    kind = type(stmt)
    if kind in (cst.If, cst.While):
        return [stmt.test]
    if kind is cst.For:
        return [stmt.iter]
    if kind is cst.With:
        return [i.item for i in stmt.items]
    return []
