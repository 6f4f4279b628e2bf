import sys

from pidispatch.cli import main

sys.exit(main())
