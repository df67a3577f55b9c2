"""Layer 1: what the project is made of. The variant list, where things live, the transfer
profile (the benchmark's workload), the one error base type and the atomic file writer. Imports
nothing from sam3d but sam3d.device (the GPU machine's program, below it)."""
