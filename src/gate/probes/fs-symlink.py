T('write through the link to ' + os.readlink(D), lambda: W(D + '/' + F, True))
T('read through the link to /etc/shadow', lambda: R(S))
