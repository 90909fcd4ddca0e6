"""The Hypothesis profiles of the proof, and how much each campaign runs under them.

``register_profiles`` (called by ``settee.proof.plugin``) registers:

* ``ci`` — fast enough for every push, derandomized (the same examples on every run,
  so a red CI is reproducible and a green one is not luck); failures print a
  reproducer blob. The proof's default.
* ``verify`` — the long campaign (2000 examples per test), random; ``long`` is the
  same profile under the name the proof's issues use.

``--hypothesis-profile NAME`` or ``SETTEE_HYPOTHESIS_PROFILE`` picks one. The
machines need their own step counts on top of that, so this module turns the
profile in force into settings; outside ``ci`` the profile's ``max_examples``
applies as it is.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

__all__ = [
    "PROFILES",
    "PROFILE_ENV",
    "equivalence_settings",
    "hypothesis_profile",
    "interleaving_settings",
    "register_profiles",
    "scaled",
]

#: The environment variable that picks a profile (pytest's ``--hypothesis-profile`` too).
PROFILE_ENV = "SETTEE_HYPOTHESIS_PROFILE"
PROFILES = ("ci", "verify", "long")

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
#: Every phase but "explain": it re-runs the shrunk example under a line tracer to list
#: "lines only failing runs reached", which costs minutes on these machines and adds
#: nothing the printed steps and the replay blob do not already say.
PHASES = [phase for phase in Phase if phase is not Phase.explain]


def register_profiles() -> None:
    """Register ``ci``, ``verify`` and ``long`` (loading one is the caller's choice)."""
    settings.register_profile(
        "ci",
        max_examples=50,
        deadline=None,
        derandomize=True,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile(
        "verify",
        max_examples=2000,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile("long", settings.get_profile("verify"))


def hypothesis_profile() -> str:
    """The settee profile in force: the loaded one if it is settee's, else ``ci``."""
    name = settings.get_current_profile_name()
    return name if name in PROFILES else "ci"


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
