"""``python -m python_jobs.ingest --help``."""

import sys

from python_jobs.ingest.cli import main

sys.exit(main())
