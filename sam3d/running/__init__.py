"""Layer 3: running things. The benchmark driver and its runs, the GPU bundle (packing it, its
runner bundle_run.py, which needs only python3, and reading back what it wrote). Uses
sam3d.core and sam3d.tools; never sam3d.results (the CLI puts the two together)."""
