P('nodename', os.uname().nodename)
T('sethostname', lambda: socket.sethostname('gate-pwned'))
RUN('hostname(1)', ['hostname', 'gate-pwned'])
