"""Layer 5, the top: the command line (`python -m sam3d`, the `sam3d` console script). It puts
the layers below together; nothing in sam3d imports it. sam3d/ci.py, the CI workflow's
`python -m sam3d.ci`, is the other command at this layer."""

from .main import main

__all__ = ["main"]
