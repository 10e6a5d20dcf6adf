"""Time on large files grows linearly: the per-window work of each rule never rescans the file."""

from __future__ import annotations

from conftest import findings_for

import kcheck.rules.measurement.timed_without_l2_flush as kc409


def test_kc409_searches_the_file_text_once_however_many_windows(monkeypatch):
    """Before: ``_large_inputs`` searched the whole text for a vocabulary once per timing window
    (75 s at 1 MB, 256 s at 2 MB); now once per file, and the findings are the same."""
    block = ("def time_{i}(k, logits, reps=100):\n    start = torch.cuda.Event(enable_timing=True)\n"
             "    end = torch.cuda.Event(enable_timing=True)\n    k(logits)\n    start.record()\n"
             "    for _ in range(reps):\n        k(logits)\n    end.record()\n    end.synchronize()\n"
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
