import sys

from python_jobs.capture.cli import main

sys.exit(main())
