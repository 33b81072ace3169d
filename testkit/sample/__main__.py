import sys

from testkit.sample.cli import main

sys.exit(main())
