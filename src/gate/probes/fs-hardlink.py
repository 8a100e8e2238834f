T('link ' + HOST, lambda: os.link(HOST, '/workspace/gate-hl-1-' + M))
T('link /usr/bin/id', lambda: os.link('/usr/bin/id', '/workspace/gate-hl-2-' + M))
T('link /etc/passwd', lambda: os.link('/etc/passwd', '/workspace/gate-hl-3-' + M))
