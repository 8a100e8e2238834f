for p in ('/proc/sys/kernel/hostname', '/proc/sys/kernel/core_pattern', '/proc/sys/vm/drop_caches', '/proc/sysrq-trigger'):
    T('open for writing ' + p, lambda p=p: OW(p))
