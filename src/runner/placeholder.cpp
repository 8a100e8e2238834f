// placeholder until runner has sources
