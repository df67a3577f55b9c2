"""Layer 1, the bottom: what the project is made of. The variant list, where things live, the
transfer profile (the benchmark's workload), the one error base type, the atomic file writer,
and the host facts and sanitizer options that the GPU bundle's runner shares (host.py, standard
library only). Imports nothing else from sam3d."""
