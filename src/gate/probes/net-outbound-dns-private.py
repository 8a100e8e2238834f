for n in NAMES:
    T('resolve ' + n, lambda n=n: sorted({a[4][0] for a in socket.getaddrinfo(n, 80, socket.AF_INET)}))
