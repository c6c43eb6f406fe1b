from __future__ import annotations

import sys

from torus.cli import main

sys.exit(main())
