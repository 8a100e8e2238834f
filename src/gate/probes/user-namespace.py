C('unshare(CLONE_NEWUSER)', lambda: SC(272, 0x10000000))
RUN('unshare --user --map-root-user', ['unshare', '--user', '--map-root-user', '/bin/true'])
