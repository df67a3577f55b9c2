"""The entry point of the bundle's zipapp (run.pyz: this file is its __main__.py) and of
`python -m sam3d.device`."""

import sys

from sam3d.device.run import main

sys.exit(main())
