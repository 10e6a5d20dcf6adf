"""Time on large files grows linearly: the per-window work of each rule never rescans the file."""

from __future__ import annotations

from conftest import REPO, findings_for

import kcheck.rules.measurement.timed_without_l2_flush as kc409


def test_kc409_searches_the_file_text_once_however_many_windows(monkeypatch):
    """Before: ``_large_inputs`` searched the whole text for a vocabulary once per timing window
    (75 s at 1 MB, 256 s at 2 MB); now once per file, and the findings are the same."""
    # each window times a module-level kernel (a helper timing only a callable parameter that no
    # caller in the module passes is not judged by KC409)
    block = ("def time_{i}(logits, reps=100):\n    start = torch.cuda.Event(enable_timing=True)\n"
             "    end = torch.cuda.Event(enable_timing=True)\n    kernel(logits)\n    start.record()\n"
             "    for _ in range(reps):\n        kernel(logits)\n    end.record()\n    end.synchronize()\n"
             "    return start.elapsed_time(end) / reps\n\n")
    searches = []

    class Counting:
        def __init__(self, pattern):
            self.pattern = pattern

        def search(self, text):
            searches.append(len(text))
            return self.pattern.search(text)

    monkeypatch.setattr(kc409, "VOCAB", Counting(kc409.VOCAB))
    counts = {}
    for n in (5, 40):
        searches.clear()
        found = findings_for("import torch\n\n" + "".join(block.format(i=i) for i in range(n)),
                             path="benchmarks/bench_tune.py", select=("KC409",))
        counts[n] = (len(searches), len([f for f in found if f.code == "KC409"]))
    assert counts == {5: (1, 5), 40: (1, 40)}, counts


# -- large files read in chunks of top-level statements (kcheck.chunks) ----------------------------
#
# Above ``chunks.LARGE_FILE_BYTES`` the project index's facts, the syntax check and the parse check
# of a file with suppressions are computed per chunk of about ``chunks.CHUNK_BYTES``. The tests lower
# both (the same code runs, on files a few dozen KB long) and compare with the whole-file path.

import ast  # noqa: E402
import json  # noqa: E402
import textwrap  # noqa: E402

import pytest  # noqa: E402

from kcheck import chunks  # noqa: E402
from kcheck.config import Config  # noqa: E402
from kcheck.engine import check_source  # noqa: E402
from kcheck.project import facts_in_chunks, file_facts  # noqa: E402

# Everything that could fool a cut: a docstring and a string constant with lines in column 0 that
# look like statements, a decorator over several lines, if/else, try/except/finally at the top
# level, a name defined again and imported again in later chunks (the facts keep the whole file's
# answer: the first import of a name wins, calls of a name defined twice are all kept).
HEADER = '''"""Generated lookup tables.

def looks_like_a_function():
    return "but is the module docstring"
"""
from __future__ import annotations

from ..ops.sampling import top_k_mask
from ..ops import norms

FLAG = True
'''
BLOCK = '''

@register(
    "entry_{i}",
    priority={i},
)
def helper_{i}(table, key):
    """Look up {i}.

def not_a_function():
    pass
"""
    if key in table:
        return table[key]
    return helper_{j}(table, key) + shared(key)


def shared(key):
    return norms.scale_{i}(key)


if FLAG:
    ROW_{i} = {{"name": "row_{i}", "size": {i}}}
elif FLAG is None:
    ROW_{i} = ()
else:
    ROW_{i} = None

try:
    from .fast_{i} import fast
except ImportError:
    fast = None
finally:
    FAST_{i} = fast

TEMPLATE_{i} = """
class NotAClass:
    x = {i}
"""
from ..ops.other_{i} import top_k_mask as mask_{i}, norms
'''
# The same shapes with no word a rule's text prefilter looks for (no ``if``, ``except``, ``int(``...):
# a file no rule wants, which only the syntax check (or, with suppressions, the parse check) reads.
PLAIN = '''

@register(
    "entry_{i}",
    priority={i},
)
@cached
def lookup_{i}(table, key):
    """Look up {i}.

def not_a_function():
    pass
"""
    return table.get(key) or lookup_{j}(table, key)


for _name in ("a_{i}", "b_{i}"):
    ROWS.append(_name)
else:
    ROWS.append(None)

try:
    from .fast_{i} import fast
finally:
    FAST_{i} = None

TEMPLATE_{i} = """
class NotAClass:
    x = {i}
"""
ROW_{i} = {{"name": "row_{i}", "size": {i}}}
'''
STEP = '''

class Sampler:
    def forward(self, logits, k):
        mask = top_k_mask(logits, k)
        return norms.scale(logits.masked_fill(mask, -1e9))
'''


def _generated(blocks: int, step: bool = False, block: str = BLOCK) -> str:
    return HEADER + "".join(block.format(i=i, j=(i + 7) % blocks) for i in range(blocks)) + (STEP if step else "")


@pytest.fixture
def small_chunks(monkeypatch):
    """The chunked path for files over 2 KB, in chunks of about 1 KB."""
    monkeypatch.setattr(chunks, "LARGE_FILE_BYTES", 2_000)
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 1_000)


def test_cuts_fall_only_where_a_top_level_statement_starts():
    text = _generated(12) + "".join(PLAIN.format(i=i, j=i) for i in range(12))
    tree = ast.parse(text)
    line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    starts = {line_starts[min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", []))]) - 1]
              for s in tree.body}
    offsets = chunks.cuts(text, 1)  # a cut at every place one may fall
    # the module's first statement and three more in the header, six statements a BLOCK, five a PLAIN
    assert len(offsets) == 4 + 12 * 6 + 12 * 5 and set(offsets) <= starts
    first_lines = {text[o:].split("\n", 1)[0].split("(")[0] for o in offsets}
    assert first_lines.isdisjoint({"def helper_0", "def lookup_0", "@cached", "else:", "elif FLAG is None:",
                                   "except ImportError:", "finally:", "from __future__ import annotations",
                                   "def not_a_function", "class NotAClass:"})


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_chunks_carry_the_files_line_numbers(newline):
    text = _generated(12).replace("\n", newline)
    whole = [(type(s).__name__, s.lineno, s.end_lineno) for s in ast.parse(text).body]
    parts = chunks.trees(text, lambda tree: [(type(s).__name__, s.lineno, s.end_lineno) for s in tree.body], 1_000)
    assert len(parts) > 5 and [s for part in parts for s in part] == whole


def test_facts_read_in_chunks_are_the_whole_files_in_the_same_order():
    data = _generated(40, step=True).encode()
    whole = file_facts(ast.parse(data), "pkg/layers/sampler.py")
    part = facts_in_chunks(data, "pkg/layers/sampler.py", 300)
    assert len(chunks.cuts(data.decode(), 300)) > 60
    assert part == whole
    for name in ("imports", "calls", "once_after"):
        assert list(getattr(part, name).items()) == list(getattr(whole, name).items()), name
    assert whole.imports["top_k_mask"] == "pkg.ops.sampling.top_k_mask" and len(whole.calls["shared"]) == 40


@pytest.mark.parametrize("broken", [
    "x = 1\nfrom __future__ import annotations\n",  # a late future import
    "r'''doc'''\nfrom __future__ import annotations\n",  # after a statement that would be a chunk's docstring
    "global FLAG\n",  # module-level global after FLAG is assigned
    "return FLAG\n",
    "y: (z := 1) = 2\n",  # a walrus in an annotation, under the first chunk's ``annotations`` future
])
def test_what_does_not_compile_whole_does_not_compile_in_chunks(broken):
    text = _generated(12) + "\n" + broken + _generated(4)[len(HEADER):]
    with pytest.raises(SyntaxError):
        compile(text, "x.py", "exec", dont_inherit=True)
    assert not chunks.compiles(text, "x.py", 1_000)
    assert chunks.compiles(_generated(12), "x.py", 1_000)


def test_a_syntax_error_in_a_later_chunk_is_reported_at_its_line(small_chunks, monkeypatch):
    text = _generated(30)
    lines = text.split("\n")
    bad = [n for n, line in enumerate(lines, 1) if line == "    return helper_24(table, key) + shared(key)"][0]
    lines[bad - 1] = "    return helper_24(table, key) + = shared(key)"
    text = "\n".join(lines)
    offsets = chunks.cuts(text)
    chunk = max(k for k, o in enumerate(offsets) if text[:o].count("\n") < bad)
    assert chunk >= 3  # the error is well past the first chunk
    assert facts_in_chunks(text.encode(), "pkg/tables.py") is None  # the caller parses it whole
    config = Config(root=REPO)
    chunked = check_source(text, "pkg/tables.py", config)
    monkeypatch.setattr(chunks, "LARGE_FILE_BYTES", 10**9)
    whole = check_source(text, "pkg/tables.py", config)
    assert [(f.code, f.line) for f in chunked.findings] == [("KC900", bad)]
    assert chunked.findings == whole.findings


def _project(tmp_path) -> dict[str, int]:
    """A project with three large files: the model, whose ``forward`` makes a helper of another
    module per-step (its facts decide KC203 there); tables, that only the syntax check reads; notes,
    with an unused suppression (KC901), that only the parse check reads."""
    files = {
        "pyproject.toml": "[tool.kcheck]\nroot = true\n",
        "pkg/__init__.py": "", "pkg/layers/__init__.py": "", "pkg/ops/__init__.py": "",
        "pkg/layers/sampler.py": "import torch\n" + _generated(40, step=True),
        "pkg/ops/sampling.py": textwrap.dedent("""\
            import torch


            def top_k_mask(logits, k):
                kth = int(k.max().item())
                return logits < torch.topk(logits, kth).values[..., -1:]
            """),
        "pkg/ops/norms.py": "def scale(x):\n    return x / x.norm()\n",
        "pkg/tables.py": _generated(30, block=PLAIN),
        "pkg/notes.py": _generated(20, block=PLAIN) + "\nLAST = 1  # kcheck: ignore[KC203] kept for the old loader\n",
    }
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    return {rel: len(text) for rel, text in files.items() if rel.startswith("pkg/") and len(text) > 2_000}


def test_findings_are_the_same_with_the_chunks_on_and_off(tmp_path, run_kcheck, monkeypatch):
    large = _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    read = []  # the length of each text read in chunks
    each = chunks.each
    monkeypatch.setattr(chunks, "each", lambda text, *a, **k: read.append(len(text)) or each(text, *a, **k))
    runs = {}
    for name, threshold in (("chunked", 2_000), ("whole", 10**9)):
        monkeypatch.setattr(chunks, "LARGE_FILE_BYTES", threshold)
        monkeypatch.setattr(chunks, "CHUNK_BYTES", 1_000)
        read.clear()
        code, out, err = run_kcheck("check", "--no-cache", "--exit-zero", "-o", "json", "pkg")
        assert code == 0, err
        runs[name] = (json.loads(out), sorted(read))
    findings, chunked_reads = runs["chunked"]
    assert runs["whole"] == (findings, [])
    # each large file's facts, and the tables' syntax check; the notes' unused suppression of KC203
    # is settled by that rule's facts (no per-step path there reaches a sync), with no parse
    assert chunked_reads == sorted([*large.values(), large["pkg/tables.py"]])
    got = {(f["code"], f["filename"]) for f in findings}
    assert ("KC203", "pkg/ops/sampling.py") in got and ("KC901", "pkg/notes.py") in got
    (sync,) = [f for f in findings if f["code"] == "KC203"]
    assert "called every step from pkg.layers.sampler.Sampler.forward()" in sync["message"]


TIMED = '''

def bench_{i}(fn, x):
    start = time.perf_counter()
    for _ in range(10):
        fn(x)
        torch.cuda.synchronize()
    return time.perf_counter() - start
'''


def test_rules_read_a_file_over_the_whole_file_limit_in_chunks(tmp_path, run_kcheck, monkeypatch):
    """Above chunks.WHOLE_FILE_LIMIT the rules see one chunk at a time beside the file's imports:
    the same findings at the same lines (here every finding needs the file's ``import torch``, made
    in the first chunk), suppressions in later chunks applied, and no whole-file tree built."""
    body = "".join(TIMED.format(i=i) for i in range(40))
    lines = body.split("\n")
    target = [n for n, line in enumerate(lines, 4) if line.strip() == "torch.cuda.synchronize()"][30]
    lines[target - 4] += "  # kcheck: ignore[KC201] the sync is the point of this helper"
    text = "import time\n\nimport torch\n" + "\n".join(lines)
    (tmp_path / "pyproject.toml").write_text("[tool.kcheck]\nroot = true\n")
    (tmp_path / "timing.py").write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(chunks, "RULE_CHUNK_BYTES", 1_000)
    pieces = []
    each = chunks.each
    monkeypatch.setattr(chunks, "each", lambda t, fn, *a, **k: each(t, lambda p, *b: pieces.append(1) or fn(p, *b), *a, **k))
    runs = {}
    for name, limit in (("chunked", 2_000), ("whole", 10**9)):
        monkeypatch.setattr(chunks, "WHOLE_FILE_LIMIT", limit)
        pieces.clear()
        code, out, err = run_kcheck("check", "--no-cache", "--exit-zero", "-o", "json", "timing.py")
        assert code == 0, err
        runs[name] = (json.loads(out), len(pieces))
    (chunked, pieces_read), (whole, _) = runs["chunked"], runs["whole"]
    assert pieces_read >= 6  # read a chunk at a time
    assert chunked == whole
    found = [f for f in chunked if f["code"] == "KC201"]
    assert len(found) == 39 and target not in {f["location"]["row"] for f in found}
