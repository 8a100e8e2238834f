T('stat /proc/%d (the runner)' % RPID, lambda: os.stat('/proc/%d' % RPID) and None)
T('read /proc/%d/mem' % RPID, lambda: R('/proc/%d/mem' % RPID))
seen = []
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            with open('/proc/%s/cmdline' % p, 'rb') as f:
                if ('motor-' 'runner').encode() in f.read():
                    seen.append(p)
        except OSError:
            pass
P('a runner process', 'visible as %s' % seen if seen else 'absent')
T('process_vm_readv of the runner', lambda: SC(310, RPID, 0, 0, 0, 0, 0))
