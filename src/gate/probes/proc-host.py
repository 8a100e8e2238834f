pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
marker, runner = [], []
for p in pids:
    try:
        with open('/proc/%d/cmdline' % p, 'rb') as f:
            cl = f.read().replace(b'\0', b' ').decode('utf-8', 'replace')
    except OSError:
        continue
    if MK in cl:
        marker.append(p)
    if ('motor-' 'runner') in cl:
        runner.append(p)
P('processes the job sees', len(pids))
P('host marker process', 'visible as %s' % marker if marker else 'absent')
P('runner process', 'visible as %s' % runner if runner else 'absent')
T('stat /proc/%d (a host pid)' % HOSTPID, lambda: os.stat('/proc/%d' % HOSTPID) and None)
