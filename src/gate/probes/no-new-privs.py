for line in open('/proc/self/status'):
    k, _, v = line.partition(':')
    if k == 'NoNewPrivs':
        P(k, v.strip())
