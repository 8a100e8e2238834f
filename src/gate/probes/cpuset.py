for line in open('/proc/self/status'):
    if line.startswith('Cpus_allowed_list:'):
        P('Cpus_allowed_list', line.split(':', 1)[1].strip())
time.sleep(2)
