def conn():
    s = socket.create_connection(('127.0.0.1', PORT), timeout=3)
    s.close()
T('connect 127.0.0.1:%d' % PORT, conn)
with open('/proc/net/dev') as f:
    P('interfaces', ','.join(sorted(l.split(':')[0].strip() for l in f.readlines()[2:])))
