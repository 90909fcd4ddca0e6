import sys

from settee.cli import main

sys.exit(main())
