"""`python -m tether` runs the command line."""

from tether.cli import main

raise SystemExit(main())
