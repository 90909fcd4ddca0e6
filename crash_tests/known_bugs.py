"""Engine bugs the crash suite found and steers around meanwhile.

A failure matching an entry is counted and printed but does not fail the big
campaigns, so they keep checking everything else; each entry has a strict-xfail
minimal test in ``test_crash.py``, and once the engine is fixed that test XPASSes
(a strict failure) and the entry must go.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["KNOWN_BUGS", "known_bug"]

#: Name -> whether a (crash-state kind, problem) pair is that bug. Empty: none known.
KNOWN_BUGS: dict[str, Callable[[str, str], bool]] = {}


def known_bug(kind: str, problems: list[str]) -> str | None:
    """The known bug every one of ``problems`` (after a ``kind`` crash) matches, if any."""
    for name, matches in KNOWN_BUGS.items():
        if problems and all(matches(kind, p) for p in problems):
            return name
    return None
