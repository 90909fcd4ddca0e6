"""settee's proof, installed with the engine: run it against any engine.

* ``settee.proof.stateful`` (``stateful_tests/`` in a checkout) — the Hypothesis
  machines: engine against reference, scheduled interleavings, real threads;
* ``settee.proof.crash`` (``crash_tests/``) — the simulated file system, crash
  states, bit flips, io errors and kill -9;
* ``settee verify`` runs their campaigns for a time budget.

The proof imports the engine, the reference and the spec; nothing in them
imports the proof.
"""
