"""How much each campaign runs under the Hypothesis profile in force.

The root conftest registers the profiles (``ci`` by default, ``verify`` for
the long campaign, chosen by ``SETTEE_HYPOTHESIS_PROFILE``). The machines
here need their own step counts on top of that, so this module turns the
profile name into settings; outside ``ci`` the profile's ``max_examples``
applies as it is.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

from settee.proof.stateful.engines import hypothesis_profile

__all__ = ["equivalence_settings", "interleaving_settings", "scaled"]

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
#: Every phase but "explain": it re-runs the shrunk example under a line tracer to list
#: "lines only failing runs reached", which costs minutes on these machines and adds
#: nothing the printed steps and the replay blob do not already say.
PHASES = [phase for phase in Phase if phase is not Phase.explain]


def scaled(ci_examples: int) -> int:
    """``ci_examples`` in the ci profile, the profile's own count otherwise."""
    if hypothesis_profile() == "ci":
        return ci_examples
    return max(ci_examples, settings.default.max_examples)


def equivalence_settings(max_examples: int | None = None) -> settings:
    return settings(
        max_examples=scaled(250) if max_examples is None else max_examples,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=_SUPPRESS,
        print_blob=True,
        phases=PHASES,
    )


def interleaving_settings(max_examples: int | None = None) -> settings:
    return settings(
        max_examples=scaled(150) if max_examples is None else max_examples,
        deadline=None,
        suppress_health_check=_SUPPRESS,
        print_blob=True,
        phases=PHASES,
    )
