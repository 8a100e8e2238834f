// placeholder until reactor has sources
