for p in ('/sys/kernel/mm/ksm/run', '/sys/kernel/uevent_helper', '/sys/power/state'):
    T('open for writing ' + p, lambda p=p: OW(p))
