// placeholder until client has sources
