T('read /etc/shadow', lambda: R('/etc/shadow'))
