"""Layer 0, the bottom: the program run on the GPU machine (run.py: `python3 sam3d-device/run.pyz
--out DIR`), with the host facts and sanitizer options it shares with the build machine's runs
(host.py) and the GPU checkers' parts (gpu_checks.py). Standard library only, and imports nothing
else from sam3d: the GPU bundle packs this package as one zipapp (sam3d/running/bundle.py) for a
machine that has nothing but python3; the host side imports it as a normal module."""
