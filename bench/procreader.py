"""One reader process of the ``processes`` scenario: random gets on a readonly handle.

``python -m bench.procreader PATH DOCS SECONDS SEED`` opens ``PATH`` with
``readonly=True``, prints ``ready``, waits for a line on stdin, then does random
``get``s of the first ``DOCS`` preloaded documents for ``SECONDS`` and prints
``{"reads": n, "seconds": s}`` as one JSON line. Starting Python and importing
settee happen before ``ready``, so they are not measured.
"""

from __future__ import annotations

import json
import random
import sys
import time

import settee
from bench.stores import doc_id


def main(argv: list[str]) -> int:
    path, docs, seconds, seed = argv[0], int(argv[1]), float(argv[2]), int(argv[3])
    rng = random.Random(seed)
    with settee.open(path, readonly=True) as db:
        db.get(doc_id(0))
        print("ready", flush=True)
        sys.stdin.readline()
        reads = 0
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            db.get(doc_id(rng.randrange(docs)))
            reads += 1
            if reads % 64 == 0 and time.perf_counter() >= deadline:
                break
        elapsed = time.perf_counter() - start
    print(json.dumps({"reads": reads, "seconds": elapsed}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
