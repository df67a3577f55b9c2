/* A module for keep_loaded_check to open and close: nothing else loads it. */
int sam3d_keep_loaded_probe(void) { return 1; }
