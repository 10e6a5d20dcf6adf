"""What kcheck reads in C++/CUDA source held in a Python string: a ``load_inline`` extension's
``cpp_sources`` and ``cuda_sources``.

The Python side sees ``ext.reverse_cumsum_cuda(x)`` as one opaque call. The host function it
enters is in the file, as text: when that function waits for the GPU (``cudaDeviceSynchronize()``,
a blocking ``cudaMemcpy``, ``.item<float>()``, ``.cpu()``), every Python call of it is a host
sync, in a timed ``forward`` as much as ``torch.cuda.synchronize()`` would be. This module finds
those functions with a brace-matching scan, not a C++ parser: comments and string literals are
blanked first, ``__global__``/``__device__`` functions are left out (device code), and a host
function that calls another such function of the same source waits too.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Host calls that wait for the GPU: a device or stream barrier, a blocking copy, reading a
# tensor's value into a host scalar or moving it to the CPU.
HOST_WAIT = re.compile(
    r"\b(?P<fn>cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|cudaMemcpy(?:2D|3D|FromSymbol|ToSymbol)?"
    r"|torch::cuda::synchronize|c10::cuda::device_synchronize)\s*\("
    r"|\.(?P<method>item|cpu)\s*(?:<[^<>()]*>)?\s*\(\s*\)"
)
_BLANK = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])'", re.S)
_NAME_BEFORE_PAREN = re.compile(r"([A-Za-z_]\w*)\s*$")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype"}


def looks_native(text: str) -> bool:
    """Whether a Python string holds C++/CUDA code worth reading."""
    return "{" in text and ("__global__" in text or "torch::" in text or "at::" in text or "#include" in text)


def file_host_syncs(texts) -> dict[str, str]:
    """:func:`host_syncs` over every string of a file that :func:`looks_native`: what both the
    ``ast`` shortcut and the libcst model read, so that the two agree."""
    found: dict[str, str] = {}
    for text in texts:
        if looks_native(text):
            found.update(host_syncs(text))
    return found


@lru_cache(maxsize=256)
def host_syncs(source: str) -> dict[str, str]:
    """The host functions of ``source`` that wait for the GPU, each with the first wait found
    (``"cudaDeviceSynchronize()"``, or ``"helper() -> .item()"`` through a callee)."""
    bodies = _host_functions(_BLANK.sub(lambda m: " " * len(m.group(0)), source))
    found: dict[str, str] = {}
    for name, body in bodies.items():
        wait = HOST_WAIT.search(body)
        if wait:
            found[name] = f"{wait.group('fn')}()" if wait.group("fn") else f".{wait.group('method')}()"
    changed = True
    while changed:  # a host function that calls one that waits, waits
        changed = False
        for name, body in bodies.items():
            if name in found:
                continue
            callee = next((c for c in _CALLED.findall(body) if c in found and c != name), None)
            if callee is not None:
                found[name] = f"{callee}() -> {found[callee]}"
                changed = True
    return found


def _host_functions(code: str) -> dict[str, str]:
    """Top-level function bodies by name (namespaces entered; ``__global__``/``__device__``,
    classes and structs left out). A name defined twice keeps both bodies, joined."""
    out: dict[str, str] = {}
    i, n = 0, len(code)
    start = 0  # where the current top-level declaration began
    while i < n:
        ch = code[i]
        if ch in ";}":
            start = i + 1
        elif ch == "{":
            header = code[start:i]
            close = _matching(code, i)
            if re.search(r"\bnamespace\b", header) or header.strip().startswith("extern"):
                start = i + 1  # enter: its functions are top-level for us
            else:
                name = _function_name(header)
                if name is not None:
                    out[name] = out.get(name, "") + code[i + 1:close]
                i, start = close, close + 1
        i += 1
    return out


def _function_name(header: str) -> str | None:
    if re.search(r"\b(__global__|__device__|class|struct|union|enum|template\s*<[^>]*>\s*struct)\b", header) \
            or "=" in header.split("(")[0]:
        return None
    end = header.rfind(")")
    if end < 0:
        return None
    depth, j = 0, end
    while j >= 0:  # the parenthesis that opens the parameter list
        depth += {")": 1, "(": -1}.get(header[j], 0)
        if depth == 0:
            break
        j -= 1
    found = _NAME_BEFORE_PAREN.search(header[:max(j, 0)])
    if found is None or found.group(1) in _NOT_FUNCTIONS:
        return None
    return found.group(1)


def _matching(code: str, at: int) -> int:
    depth = 0
    for j in range(at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def wait_line(text: str, function: str, what: str) -> int | None:
    """The line of the Python file ``text`` where host function ``function`` waits as
    :func:`host_syncs` described it (``what``; through a callee, the call of it)."""
    token = what.split(" -> ")[0].removesuffix("()")
    return line_of(text, function, token if token.startswith(".") else token + "(")


def line_of(text: str, function: str, token: str) -> int | None:
    """The line (1-based) of the Python file ``text`` where ``token`` first appears in the body of
    ``function``, a C++ function defined in one of the file's strings (comment lines skipped).
    None when the definition is not found as written (a source assembled at run time)."""
    header = re.compile(rf"^[ \t]*[\w:<>,*& \t]+?[\s*&]{re.escape(function)}\s*\(")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if header.match(line) and not line.rstrip().endswith(";"):
            for j in range(i + 1, len(lines)):
                stripped = lines[j].lstrip()
                if token in lines[j] and not stripped.startswith(("//", "/*", "*")):
                    return j + 1
                if stripped.startswith('"""') or stripped.startswith("'''"):
                    return None  # the end of the Python string: not found in this source
            return None
    return None
