for line in open('/proc/self/status'):
    k, _, v = line.partition(':')
    if k == 'Seccomp':
        P(k, v.strip())
