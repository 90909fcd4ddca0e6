"""Seventh mutation round: validation slips on one path only (hostile input).

Candidates are tried in ``stateful_tests/test_mutants_round7.py``; the docstring
there and below is filled in once they have run.
"""

from __future__ import annotations

from typing import Any

from settee import database
from settee.database import Database
from settee.proof.stateful.mutants import Wrapper
from settee.proof.stateful.mutants.internals import _Swapping, slipped
from settee.spec import arguments, attachments, docs, revs

__all__ = ["ROUND7", "ROUND7_CAUGHT"]

_WRITES = ("put", "bulk_docs", "delete")


class BodyIntUnbounded(_Swapping):
    """The inline fast path of ``_plain_body`` takes any exact int: the 64-bit bound
    is only checked for int subclasses (``_plain_scalar``)."""

    calls = _WRITES
    swaps = ((docs, "_plain_body", "plain_body"),)
    plain_body = staticmethod(
        slipped(
            docs._plain_body,
            "or (kind is int and _INT_MIN <= value <= _INT_MAX)",
            "or (kind is int)",
        )
    )


class BodyIntNoLowerBound(_Swapping):
    """The fast path checks only the upper 64-bit bound of an exact int."""

    calls = _WRITES
    swaps = ((docs, "_plain_body", "plain_body"),)
    plain_body = staticmethod(
        slipped(
            docs._plain_body,
            "or (kind is int and _INT_MIN <= value <= _INT_MAX)",
            "or (kind is int and value <= _INT_MAX)",
        )
    )


class BodyInfinityPasses(_Swapping):
    """The fast path refuses NaN (``value == value``) but not infinities."""

    calls = _WRITES
    swaps = ((docs, "_plain_body", "plain_body"),)
    plain_body = staticmethod(
        slipped(
            docs._plain_body,
            "or (kind is float and math.isfinite(value))",
            "or (kind is float and value == value)",
        )
    )


class ListFloatsUnchecked(_Swapping):
    """The fast path skips the finiteness test of floats inside lists (a list's items
    were thought checked by its parent): ``{"x": [nan]}`` is stored."""

    calls = _WRITES
    swaps = ((docs, "_plain_body", "plain_body"),)
    plain_body = staticmethod(
        slipped(
            docs._plain_body,
            "or (kind is float and math.isfinite(value))",
            "or (kind is float and (not is_map or math.isfinite(value)))",
        )
    )


class FloatSubclassInfinityPasses(_Swapping):
    """A float subclass's value is tested for NaN only: ``FloatSubclass('inf')`` is
    stored."""

    calls = _WRITES
    swaps = ((docs, "_plain_subclass_scalar", "plain_subclass_scalar"),)
    plain_subclass_scalar = staticmethod(
        slipped(docs._plain_subclass_scalar, "if not math.isfinite(real):", "if real != real:")
    )


class BodyTextUnchecked(_Swapping):
    """The fast path takes any exact str value, non-ASCII ones unchecked for lone
    surrogates."""

    calls = _WRITES
    swaps = ((docs, "_plain_body", "plain_body"),)
    plain_body = staticmethod(
        slipped(docs._plain_body, "(kind is str and value.isascii())", "(kind is str)")
    )


class BodyKeyTextUnchecked(_Swapping):
    """A body's exact-str keys are never checked for lone surrogates (only subclasses
    go to ``_plain_key``)."""

    calls = _WRITES
    swaps = ((docs, "_plain_body", "plain_body"),)
    plain_body = staticmethod(
        slipped(
            docs._plain_body,
            "if is_map and (type(key) is not str or not key.isascii()):",
            "if is_map and type(key) is not str:",
        )
    )


class BodyOneLevelDeeper(_Swapping):
    """The depth bound is off by one: a value at level 501 is stored."""

    calls = _WRITES
    swaps = ((docs, "_plain_body", "plain_body"),)
    plain_body = staticmethod(
        slipped(docs._plain_body, "if depth > _MAX_DEPTH and items:", "if depth > 501 and items:")
    )


class SizeLimitInclusive(_Swapping):
    """A body of exactly ``max_document_size`` bytes is refused (``>=`` for ``>``)."""

    calls = _WRITES
    swaps = ((docs, "_normalise", "normalise"),)
    normalise = staticmethod(
        slipped(
            docs._normalise,
            "if len(packed) > max_document_size:",
            "if len(packed) >= max_document_size:",
        )
    )


class KeysSubclassesKept(_Swapping):
    """``all_docs(keys=...)``'s fast path takes str subclasses as they are (``is_a``
    for ``type(key) is str``): a lying key is looked up with its own ``__eq__`` and
    ``__hash__``, and answered as the caller's object."""

    calls = ("all_docs",)
    swaps = ((arguments, "check_keys", "check_keys"),)
    check_keys = staticmethod(
        slipped(
            arguments.check_keys,
            "if all(type(key) is str for key in keys):",
            "if all(is_a(key, str) for key in keys):",
        )
    )


class BoundsNotPlain(_Swapping):
    """``all_docs``' ``startkey`` and ``endkey`` are checked but kept as the caller's
    str subclass."""

    calls = ("all_docs",)
    swaps = ((arguments, "check_key", "check_key"),)
    check_key = staticmethod(
        slipped(
            arguments.check_key,
            "return _unicode(name, plain_str(value))",
            "return _unicode(name, value)",
        )
    )


class SinceNotPlain(_Swapping):
    """``changes(since=...)`` keeps a str subclass as given: a ``LyingStr`` equals
    ``"now"``."""

    calls = ("changes",)
    swaps = ((database, "check_since", "check_since"),)
    check_since = staticmethod(
        slipped(arguments.check_since, "return plain_str(since)", "return since")
    )


class PurgeIdsNotPlain(_Swapping):
    """``purge`` keeps each id as the caller's str subclass (``revs_diff`` makes it
    plain): its shard is found by the subclass's ``encode``."""

    calls = ("purge",)
    swaps = ((arguments, "_revs_by_id", "revs_by_id"),)
    revs_by_id = staticmethod(
        slipped(
            arguments._revs_by_id,
            'doc_id = _unicode(f"{call} id", plain_str(doc_id))',
            'doc_id = _unicode(f"{call} id", doc_id)',
        )
    )


class RevsDiffRevsNotPlain(_Swapping):
    """``revs_diff``'s revisions are checked but kept as the caller's str subclass."""

    calls = ("revs_diff",)
    swaps = ((arguments, "check_rev", "check_rev"),)
    check_rev = staticmethod(slipped(revs.check_rev, "return plain_str(rev)", "return rev"))


class GetRevNotPlain(_Swapping):
    """``get(rev=...)``'s revision is checked but kept as the caller's str subclass."""

    calls = ("get",)
    swaps = ((arguments, "check_rev", "check_rev"),)
    check_rev = staticmethod(slipped(revs.check_rev, "return plain_str(rev)", "return rev"))


class AttachmentNameNotPlain(_Swapping):
    """An attachment read's ``name`` is checked but kept as the caller's str subclass:
    a ``LyingStr`` name equals every attachment's."""

    calls = ("attachment", "attachment_chunks")
    swaps = ((database, "validate_attachment_name", "validate_attachment_name"),)
    validate_attachment_name = staticmethod(
        slipped(attachments.validate_attachment_name, "return text", "return name")
    )


_bulk_docs_iterated = slipped(
    Database.bulk_docs, "for doc in plain_items(docs)", "for doc in list(docs)"
)


class BulkDocsIterated(Wrapper):
    """``bulk_docs`` walks the caller's list with its own ``__iter__``, not its storage."""

    def bulk_docs(self, *args: Any, **kwargs: Any) -> Any:
        return _bulk_docs_iterated(self.inner, *args, **kwargs)


_get_falsy_flags = slipped(Database.get, "and revs is False", "and not revs")


class GetFastPathFalsyFlags(Wrapper):
    """``get``'s fast path takes any falsy ``revs`` (``0``, ``[]``, ``None``) for
    ``False``, so it answers instead of refusing the flag."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return _get_falsy_flags(self.inner, *args, **kwargs)


#: name -> (class, what it breaks).
ROUND7: dict[str, tuple[type, str]] = {
    "body_int_unbounded": (BodyIntUnbounded, "an exact int past 64 bits reaches msgpack"),
    "body_int_no_lower_bound": (BodyIntNoLowerBound, "an int below -2**63 reaches msgpack"),
    "body_infinity_passes": (BodyInfinityPasses, "inf is stored"),
    "list_floats_unchecked": (ListFloatsUnchecked, "NaN inside a list is stored"),
    "float_subclass_infinity_passes": (FloatSubclassInfinityPasses, "a float subclass inf"),
    "body_text_unchecked": (BodyTextUnchecked, "a lone surrogate value reaches msgpack"),
    "body_key_text_unchecked": (BodyKeyTextUnchecked, "a lone surrogate key reaches msgpack"),
    "body_one_level_deeper": (BodyOneLevelDeeper, "a value at level 501 is stored"),
    "size_limit_inclusive": (SizeLimitInclusive, "a body of exactly the limit is refused"),
    "keys_subclasses_kept": (KeysSubclassesKept, "keys= keeps str subclasses"),
    "bounds_not_plain": (BoundsNotPlain, "startkey/endkey keep str subclasses"),
    "since_not_plain": (SinceNotPlain, "since keeps a str subclass"),
    "purge_ids_not_plain": (PurgeIdsNotPlain, "purge keeps str subclass ids"),
    "revs_diff_revs_not_plain": (RevsDiffRevsNotPlain, "revs_diff keeps str subclass revs"),
    "get_rev_not_plain": (GetRevNotPlain, "get(rev=) keeps a str subclass"),
    "attachment_name_not_plain": (AttachmentNameNotPlain, "attachment names stay subclasses"),
    "bulk_docs_iterated": (BulkDocsIterated, "bulk_docs trusts the list's __iter__"),
    "get_fast_path_falsy_flags": (GetFastPathFalsyFlags, "get answers revs=0"),
}

#: The candidates the proof caught as it stood -> what caught them first.
ROUND7_CAUGHT = {
    "body_int_unbounded": "test_semantics::test_bad_documents_are_rejected_and_change_nothing",
    "body_int_no_lower_bound": (
        "test_semantics::test_bad_documents_are_rejected_and_change_nothing"
    ),
    "body_infinity_passes": "test_semantics::test_bad_documents_are_rejected_and_change_nothing",
    "body_text_unchecked": "test_semantics::test_bad_documents_are_rejected_and_change_nothing",
    "body_key_text_unchecked": (
        "test_semantics::test_bad_documents_are_rejected_and_change_nothing"
    ),
    "body_one_level_deeper": "test_hostile_input::test_values_may_nest_500_levels_and_not_one_more",
    "size_limit_inclusive": (
        "test_semantics::test_max_document_size_is_a_bound_the_body_may_reach"
    ),
    "bulk_docs_iterated": "test_hostile_input::test_sequence_arguments_are_read_as_their_storage",
}
