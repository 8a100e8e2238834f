import stat
T('mknod in /workspace', lambda: os.mknod('/workspace/gate-mem', stat.S_IFCHR | 0o600, os.makedev(1, 1)))
T('mknod in /tmp', lambda: os.mknod('/tmp/gate-mem', stat.S_IFCHR | 0o600, os.makedev(1, 1)))
