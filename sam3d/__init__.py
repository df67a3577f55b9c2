"""sam3d: build, test and measure the SAM3D batched-transfer core in every build variant."""

__version__ = "0.1.0"
