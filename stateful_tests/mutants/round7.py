"""Seventh mutation round: validation slips on one path only (hostile input).

SEMANTICS.md §15: a hostile argument gets the reference's answer or the same SetteeError,
changes nothing, and every shard still accepts writes. Twenty-five candidates, each one
slip in the engine's own validation (``slipped``: ``spec/docs.py``'s fast paths,
``spec/arguments.py``'s checks, ``Database.get``'s fast path) swapped in for the engine's
calls only, were run against ``settee verify --only semantics``, then those that passed
against one minute of ``--only equivalence``. (Interleavings and stress draw no hostile
arguments.) Eleven passed both, and ``purge_ids_not_plain`` passed the semantic suite;
each now fails the check ``stateful_tests/test_mutants_round7.py`` names for it
(``ROUND7_CHECKS``):

* ``test_hostile_input.test_a_bad_value_is_refused_wherever_it_sits``: NaN inside a list
  (``list_floats_unchecked``), a float subclass's infinity;
* ``test_hostile_input.test_every_str_argument_is_read_as_its_text`` (answers compared
  with those of plain strs, and made of exact builtins): str subclasses kept by
  ``keys=``, ``startkey``/``endkey``, ``changes(since=)`` (a lying str equals ``0``),
  ``purge``, ``revs_diff``'s revisions, ``get(rev=)``, attachment names;
* ``test_hostile_input.test_every_str_in_a_document_is_read_as_its_text``: a
  ``_revisions`` hash formatted as the caller's object, top-level keys sorted into
  special fields by the subclass's own ``startswith``;
* ``test_hostile_input.test_each_flag_of_get_is_checked_with_every_other_option_at_its_default``:
  ``get``'s fast path taking ``not revs`` for ``revs is False``.

The equivalence machine now also fails on any engine answer holding a caller's class
(``hostile.foreign_class``: a lying str equals anything, so comparing could not see it),
and draws bad values inside lists and dicts, float and int subclasses past the bounds,
and hostile ``attachment`` reads; none of those draws is frequent enough to be a certain
catch within a minute, so each escape is gated by its fixed test. The thirteen caught as
the proof stood (and ``purge_ids_not_plain``) are in ``ROUND7_CAUGHT`` with what caught them.

The round is in ``MUTANTS`` (``settee.proof.stateful.mutants:<name>``); its gates are
``test_mutants_round7.py``'s, so ``test_mutants.py``'s ``test_mutant_is_caught`` leaves
it out, as it does the earlier rounds.
"""

from __future__ import annotations

from typing import Any

from settee import database
from settee.database import Database
from settee.proof.stateful.mutants import Wrapper
from settee.proof.stateful.mutants.internals import _Swapping, slipped, swapped
from settee.spec import arguments, attachments, docs, revs

__all__ = ["ROUND7", "ROUND7_CAUGHT"]

_WRITES = ("put", "bulk_docs", "delete")


class _BodySlip(_Swapping):
    """A slip in ``spec.docs._plain_body``, the body walk every write makes: a subclass
    sets ``plain_body``, the walk with its one edit (``slipped``)."""

    calls = _WRITES
    swaps = ((docs, "_plain_body", "plain_body"),)


class BodyIntUnbounded(_BodySlip):
    """The inline fast path of ``_plain_body`` takes any exact int: the 64-bit bound
    is only checked for int subclasses (``_plain_scalar``)."""

    plain_body = staticmethod(
        slipped(
            docs._plain_body,
            "or (kind is int and _INT_MIN <= value <= _INT_MAX)",
            "or (kind is int)",
        )
    )


class BodyIntNoLowerBound(_BodySlip):
    """The fast path checks only the upper 64-bit bound of an exact int."""

    plain_body = staticmethod(
        slipped(
            docs._plain_body,
            "or (kind is int and _INT_MIN <= value <= _INT_MAX)",
            "or (kind is int and value <= _INT_MAX)",
        )
    )


class BodyInfinityPasses(_BodySlip):
    """The fast path refuses NaN (``value == value``) but not infinities."""

    plain_body = staticmethod(
        slipped(
            docs._plain_body,
            "or (kind is float and math.isfinite(value))",
            "or (kind is float and value == value)",
        )
    )


class ListFloatsUnchecked(_BodySlip):
    """The fast path skips the finiteness test of floats inside lists (a list's items
    were thought checked by its parent): ``{"x": [nan]}`` is stored."""

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


class BodyTextUnchecked(_BodySlip):
    """The fast path takes any exact str value, non-ASCII ones unchecked for lone
    surrogates."""

    plain_body = staticmethod(
        slipped(docs._plain_body, "(kind is str and value.isascii())", "(kind is str)")
    )


class BodyKeyTextUnchecked(_BodySlip):
    """A body's exact-str keys are never checked for lone surrogates (only subclasses
    go to ``_plain_key``)."""

    plain_body = staticmethod(
        slipped(
            docs._plain_body,
            "if is_map and (type(key) is not str or not key.isascii()):",
            "if is_map and type(key) is not str:",
        )
    )


class BodyOneLevelDeeper(_BodySlip):
    """The depth bound is off by one: a value at level 501 is stored."""

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


class RevisionsIdsNotPlain(_Swapping):
    """A ``_revisions`` hash is checked but formatted as the caller's str subclass: a
    lying one formats as another hash."""

    calls = _WRITES
    swaps = ((docs, "_revisions_path", "revisions_path"),)
    revisions_path = staticmethod(
        slipped(
            docs._revisions_path,
            "hash_ = plain_str(hash_) if is_a(hash_, str) else hash_",
            "hash_ = hash_",
        )
    )


class FieldNamesNotPlain(_Swapping):
    """A document's top-level keys are sorted into special and body fields as the
    caller's str subclass: a lying ``"_id"`` does not start with ``_``."""

    calls = _WRITES
    swaps = ((docs, "_split_fields", "split_fields"),)
    split_fields = staticmethod(slipped(docs._split_fields, "key = plain_str(key)", "key = key"))


class StoredAttachmentNamesNotPlain(_Swapping):
    """A written attachment's name is checked but kept as the caller's str subclass."""

    calls = _WRITES
    swaps = ((attachments, "validate_attachment_name", "validate_attachment_name"),)
    validate_attachment_name = staticmethod(
        slipped(attachments.validate_attachment_name, "return text", "return name")
    )


class KeysSurrogatesUnchecked(_Swapping):
    """``keys=``'s fast path joins the exact-str keys but never encodes them: a lone
    surrogate is looked up instead of refused."""

    calls = ("all_docs",)
    swaps = ((arguments, "check_keys", "check_keys"),)
    check_keys = staticmethod(
        slipped(arguments.check_keys, '"".join(keys).encode("utf-8")', '"".join(keys)')
    )


class BoundsSurrogatesUnchecked(_Swapping):
    """``startkey``/``endkey`` are made plain but not checked for lone surrogates."""

    calls = ("all_docs",)
    swaps = ((arguments, "check_key", "check_key"),)
    check_key = staticmethod(
        slipped(
            arguments.check_key,
            "return _unicode(name, plain_str(value))",
            "return plain_str(value)",
        )
    )


_docid_unchecked_text = slipped(docs.validate_docid, '_check_text(docid, "document id")', "pass")


class ReadIdSurrogatesUnchecked(_Swapping):
    """Reads check an id's type and ``_`` but not its UTF-8: ``get("a\\ud800")`` is
    NotFound, not BadRequest."""

    calls = ("get", "attachment", "attachment_chunks")
    swaps = ((database, "validate_docid", "validate_docid"),)
    validate_docid = staticmethod(_docid_unchecked_text)


_validate_default_size = slipped(
    Database._validate,
    'max_document_size=self.config["max_document_size"],',
    "",
)


class SizeLimitOptionIgnored(Wrapper):
    """Documents are measured against the default ``max_document_size``, not the one
    the database was opened with."""

    def put(self, *args: Any, **kwargs: Any) -> Any:
        with swapped(Database, "_validate", _validate_default_size):
            return self.inner.put(*args, **kwargs)

    def bulk_docs(self, *args: Any, **kwargs: Any) -> Any:
        with swapped(Database, "_validate", _validate_default_size):
            return self.inner.bulk_docs(*args, **kwargs)


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
    "revisions_ids_not_plain": (RevisionsIdsNotPlain, "a _revisions hash keeps its class"),
    "field_names_not_plain": (FieldNamesNotPlain, "top-level keys keep their class"),
    "stored_attachment_names_not_plain": (
        StoredAttachmentNamesNotPlain,
        "written attachment names keep their class",
    ),
    "keys_surrogates_unchecked": (KeysSurrogatesUnchecked, "keys= takes a lone surrogate"),
    "bounds_surrogates_unchecked": (BoundsSurrogatesUnchecked, "bounds take a lone surrogate"),
    "read_id_surrogates_unchecked": (ReadIdSurrogatesUnchecked, "reads take a lone surrogate"),
    "size_limit_option_ignored": (SizeLimitOptionIgnored, "max_document_size option ignored"),
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
    # Passed the semantic suite; the equivalence machine caught it in 64 s (a lying id
    # routed to another shard's purge). Gated by a fixed test as well.
    "purge_ids_not_plain": "the equivalence machine (hostile purge)",
    "stored_attachment_names_not_plain": (
        "test_hostile_input::test_attachment_names_that_read_the_same_name_one_attachment"
    ),
    "keys_surrogates_unchecked": "test_semantics::test_all_docs_bad_arguments",
    "bounds_surrogates_unchecked": "test_semantics::test_all_docs_bad_arguments",
    "read_id_surrogates_unchecked": "test_semantics::test_get_bad_arguments",
    "size_limit_option_ignored": "test_semantics::test_max_document_size",
}
