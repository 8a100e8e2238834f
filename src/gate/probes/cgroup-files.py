for p in PATHS:
    T('open for writing ' + p, lambda p=p: OW(p))
T('mount cgroup2', lambda: SC(165, b'none', b'/tmp', b'cgroup2', 0, 0))
with open('/proc/self/cgroup') as f:
    lines = f.read().split()
P('host cgroup paths in /proc/self/cgroup', 'visible' if any(PARENT in l for l in lines) else 'absent')
