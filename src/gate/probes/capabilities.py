for line in open('/proc/self/status'):
    k, _, v = line.partition(':')
    if k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'):
        P(k, v.strip())
