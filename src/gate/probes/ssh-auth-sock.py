P('SSH_AUTH_SOCK in the environment', os.environ.get('SSH_AUTH_SOCK', 'absent'))
for p in ('/proc/1/environ', '/proc/self/environ'):
    try:
        with open(p, 'rb') as f:
            P('SSH_AUTH_SOCK in ' + p, 'present' if b'SSH_AUTH_SOCK' in f.read() else 'absent')
    except OSError as e:
        P('SSH_AUTH_SOCK in ' + p, 'unreadable (%s)' % _en(e))
