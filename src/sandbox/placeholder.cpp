// placeholder until sandbox has sources
