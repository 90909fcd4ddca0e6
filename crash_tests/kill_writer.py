"""The child of ``test_kill``: writes fsynced batches, printing each acknowledgement.

``python kill_writer.py PATH RUN`` appends forever to the database at ``PATH``
(fsync=True, 2 shards): each round one ``bulk_docs`` of three new documents and
one update of the shared ``counter`` document, compacting now and then. After
each call returns it prints what was acknowledged (``ids ...`` or
``counter REV``) and flushes, so every line the parent reads is a promise.
"""

from __future__ import annotations

import sys

import settee


def main(path: str, run: str) -> None:
    db = settee.open(path, shards=2, fsync=True)
    try:
        rev = db.get("counter")["_rev"]
    except settee.NotFound:
        rev = None
    n = 0
    while True:
        ids = [f"{run}-{n}-{k}" for k in range(3)]
        db.bulk_docs([{"_id": i, "n": n, "pad": "x" * (n % 7) * 700} for i in ids])
        print("ids", *ids, flush=True)
        doc = {"_id": "counter", "run": run, "n": n}
        if rev is not None:
            doc["_rev"] = rev
        rev = db.put(doc)["rev"]
        print("counter", rev, flush=True)
        if n % 20 == 19:
            db.compact()
            print("compacted", flush=True)
        n += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
