// placeholder until protocol has sources
