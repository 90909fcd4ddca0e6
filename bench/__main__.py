"""``python -m bench``: the same command line as ``settee bench``."""

import sys

from bench.runner import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m bench"))
