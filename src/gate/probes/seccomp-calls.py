for name, nr, args in TRIES:
    C(name, lambda nr=nr, args=args: SC(nr, *args))
