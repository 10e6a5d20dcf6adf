"""Facts: what a file's ``ast`` shows, read once, that decide which rules run on it.

libcst parses most slowly of everything a scan does, so the engine first parses each candidate
file with ``ast`` (:func:`kcheck.gate.summarize`) and runs a rule, and libcst, only where the rule
can fire. A rule says where that is by naming, in ``NEEDS``, the facts without which it cannot
report; it runs on a file where one of them holds (an entry that is a tuple needs all its facts).
A rule with no ``NEEDS`` runs on every file its text prefilter lets through.

A fact is a question about the file's contexts and calls, answered by the family module that
knows the concept, over the ``ast``, always erring wide: a fact may hold where the rule then finds
nothing, never the reverse (``kcheck check --no-shortcuts`` runs every rule on every file, and the
tests compare the two). The decision itself (which sync, which fallback, which excuse) is the
rule's, on the libcst model, and is written once.

The vocabulary, and who answers:

================================  ===================================================================
fact                              holds where ...
================================  ===================================================================
``timed reaches sync``            an event window, a benchmarked callable or a host-timer window
                                  reaches a call that may be a host sync (``rules.timed_path``);
                                  likewise ``capture reaches sync``, ``hot-path reaches sync``,
                                  ``timed reaches log``, ``capture reaches log``, ``hot-path reaches
                                  log``, ``timed reaches compile``, ``hot-path reaches compile``,
                                  ``host-timer reaches gpu-work``
``claim reaches library``         a kernel claim's compute path may reach a library op
                                  (``rules.dispatch``)
``claim launches kernel``         a kernel claim may launch a kernel built or defined in the file
``dispatcher``                    a function may launch a specialised kernel (``rules.fallback``)
``claimed dispatcher``            such a function lies on a kernel claim's compute path
``dispatcher meets demands``      such a function exists and a call in the file meets what its callee's
                                  checks demand (the index's ``Config.demands``, ``kcheck.contracts``)
``kernel import under try``       a ``try`` with a broad handler imports or builds a kernel
``triton kernel``                 a Triton kernel is defined (``rules.triton``)
``autotuned kernel``              a Triton kernel is autotuned
``output check``                  measurement code compares outputs (``rules.measurement``)
``timing``                        measurement code in a GPU file takes a time
``reference reduction``           a function named as a reference reduces a tensor
================================  ===================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from kcheck.config import Config
    from kcheck.gate import Summary

Fact = Callable[["Summary", "Config"], bool]
FACTS: dict[str, Fact] = {}


def fact(*names: str) -> Callable[[Fact], Fact]:
    """Register the decorated function as the answer to the facts ``names``."""
    def register(fn: Fact) -> Fact:
        for name in names:
            if name in FACTS:
                raise ValueError(f"fact {name!r} registered twice")
            FACTS[name] = fn
        return fn
    return register


def register(name: str, fn: Fact) -> None:
    """``fact(name)(fn)`` for a fact answered by a parametrised function."""
    fact(name)(fn)


def holds(needs: tuple, summary: "Summary", config: "Config") -> bool:
    """Whether one entry of ``needs`` holds on the file (an entry that is a tuple: all its facts).
    Each fact is asked at most once per file (``summary.memo``)."""
    if not needs:
        return True
    answers = summary.memo.setdefault("facts", {})

    def one(name: str) -> bool:
        got = answers.get(name)
        if got is None:
            got = answers[name] = bool(FACTS[name](summary, config))
        return got

    return any(all(one(n) for n in entry) if type(entry) is tuple else one(entry) for entry in needs)


def unknown(needs: tuple) -> list[str]:
    """The names in ``needs`` that no family answers (a rule's mistake; the tests list them)."""
    return [n for entry in needs for n in (entry if type(entry) is tuple else (entry,)) if n not in FACTS]
