T('create in /etc', lambda: W('/etc/gate-probe'))
D = next((d for d in ('/etc/ssl', '/etc/alternatives', '/etc/ld.so.conf.d') if os.path.isdir(d)), '/etc/ssl')
P('bound /etc directory', D)
T('create in the bound /etc directory', lambda: W(D + '/gate-probe'))
