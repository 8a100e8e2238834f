pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open('/dev/null', os.O_RDWR)
        for i in (0, 1, 2):
            os.dup2(fd, i)
        os.execv('/bin/sleep', ['sleep', MK])
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.3)
P('daemon', 'started')
