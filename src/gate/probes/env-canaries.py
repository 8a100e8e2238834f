srcs = [('environment', '\n'.join('%s=%s' % kv for kv in os.environ.items()))]
for p in ('/proc/1/environ', '/proc/self/environ'):
    try:
        with open(p, 'rb') as f:
            srcs.append((p, f.read().replace(b'\0', b'\n').decode('utf-8', 'replace')))
    except OSError as e:
        P('read ' + p, _en(e))
n = 0
for top in ('/workspace', '/tmp'):
    for d, dirs, files in os.walk(top):
        for name in files:
            n += 1
            if n > 500:
                break
            try:
                with open(os.path.join(d, name), 'rb') as f:
                    srcs.append((os.path.join(d, name), f.read(1 << 20).decode('utf-8', 'replace')))
            except OSError:
                pass
P('files searched', n)
for where, text in srcs:
    for line in text.splitlines():
        if ('gate-' 'canary-') in line:
            P('canary in ' + where, line[:200])
        if ('gate-' 'forwarded-') in line:
            P('forwarded in ' + where, 'yes')
