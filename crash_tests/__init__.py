"""settee's crash suite, installed as ``settee.proof.crash``: a simulated crashing
file system, the crash checker, corruption, io-error and kill -9 tests (issue 6).

Modules: ``simfs`` (the crashing file system), ``checker`` (workloads, recordings
and the oracle), ``campaign`` (many crash points, a summary), ``corruption`` (damaged
bytes and the bit-flip campaign), ``faults`` (failing and stalling file systems),
``read_durability`` (readers see durable commits only), ``mutants`` (engines that
break one io rule), ``known_bugs``; ``kill_writer.py`` is the child ``test_kill``
kills.

``run_campaign(engine_factory, budget, seed, progress) -> Summary`` is the entry
point for ``settee verify``; see ``campaign.py``.
"""

from settee.proof.crash.campaign import Failure, Summary, replay, run_campaign

__all__ = ["Failure", "Summary", "replay", "run_campaign"]
