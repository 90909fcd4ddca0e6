"""The proof that settee's engine behaves like its serialised reference, installed
as ``settee.proof.stateful``.

Modules, in reading order:

* ``engines`` — loading the engine under test from ``"MODULE:CALLABLE"``;
* ``observe`` — turning answers into comparable values, digests and the
  ``changes`` guarantees of SEMANTICS.md §9;
* ``equivalence`` — the sequential state machine (engine vs reference);
* ``linearizability`` — a Wing & Gong checker with memoisation;
* ``history`` — concurrent clients, recorded histories and the reference as
  the sequential model;
* ``scheduler`` — deterministic interleavings at every io call and writer step;
* ``interleavings`` — one scheduled run / one real-threads run, checked;
* ``known_bugs`` — reported disagreements the machines steer around meanwhile;
* ``budget`` — the Hypothesis profiles and the example counts under each;
* ``mutants`` — deliberately broken engines the machines must catch;
* ``campaigns`` — the public entry points ``settee verify`` calls.
"""
