for c in CACHES:
    T('create in ' + c, lambda c=c: W(c + '/' + NAME, True))
