"""settee: an embedded, CouchDB-style document store."""

from settee.spec.errors import BadRequest, Conflict, CorruptionError, NotFound, SetteeError

__version__ = "0.1.0"

from settee.database import Database, open

__all__ = [
    "BadRequest",
    "Conflict",
    "CorruptionError",
    "Database",
    "NotFound",
    "SetteeError",
    "__version__",
    "open",
]
