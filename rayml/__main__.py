import sys

from rayml.cli import main

sys.exit(main())
