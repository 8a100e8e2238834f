for p in ('/proc/self/mountinfo', '/proc/self/mounts', '/proc/self/mountstats', '/proc/1/mountinfo'):
    try:
        with open(p, 'rb') as f:
            data = f.read(1 << 20).decode('utf-8', 'replace')
    except BaseException as e:
        P('read ' + p, _en(e))
        continue
    P('read ' + p, 'OK (read %d bytes)' % len(data))
    for i, line in enumerate(data.splitlines()):
        P('%s line %d' % (p, i), line)
        f = line.split(' ')
        if p == '/proc/self/mountinfo' and len(f) > 4 and f[4] == '/workspace':
            P('workspace root', f[3])
