import sys

from dualtrack.cli import main

sys.exit(main())
