import sys

from torus.cli import main

sys.exit(main())
