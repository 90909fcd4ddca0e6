"""settee's crash suite: a simulated crashing file system, the crash checker,
corruption and kill -9 tests (issue 6).

``run_campaign(engine_factory, budget, seed, progress) -> Summary`` is the entry
point for ``settee verify``; see ``crash_tests/campaign.py``.
"""

from settee.proof.crash.campaign import Failure, Summary, replay, run_campaign

__all__ = ["Failure", "Summary", "replay", "run_campaign"]
