"""`python -m memory_pipelines.surfaces.cli`."""

import sys

from .main import main

sys.exit(main())
