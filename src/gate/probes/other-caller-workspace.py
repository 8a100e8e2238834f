T('read ' + HOST, lambda: R(HOST))
T('read ' + REL, lambda: R(REL))
