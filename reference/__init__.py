"""settee.reference: the serialised model store everything is judged against.

``settee.reference.open(path=None, **options)`` returns a
:class:`~settee.reference.store.ReferenceDB` with the engine's complete
public API; see ``reference/store.py`` for the model.
"""

from settee.reference.store import ReferenceDB, open

__all__ = ["ReferenceDB", "open"]
