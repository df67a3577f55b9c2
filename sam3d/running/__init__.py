"""Layer 3: running things. The benchmark driver and its runs, the GPU bundle (packing it with
its program, sam3d.device as run.pyz, and reading back what that wrote). Uses sam3d.core,
sam3d.tools and sam3d.device; never sam3d.results (the CLI puts the two together)."""
