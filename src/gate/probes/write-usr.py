T('create in /usr', lambda: W('/usr/gate-probe'))
T('create in /usr/bin', lambda: W('/usr/bin/gate-probe'))
