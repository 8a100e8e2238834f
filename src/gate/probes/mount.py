T('mount tmpfs on /tmp', lambda: SC(165, b'none', b'/tmp', b'tmpfs', 0, 0))
T('mount(NULL, NULL)', lambda: SC(165, 0, 0, 0, 0, 0))
T('fsopen tmpfs', lambda: SC(430, b'tmpfs', 0))
RUN('mount(8)', ['mount', '-t', 'tmpfs', 'none', '/tmp'])
