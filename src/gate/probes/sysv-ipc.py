T('msgget the host queue', lambda: SC(68, KEY, 0))
