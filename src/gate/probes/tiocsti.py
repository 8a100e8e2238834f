import pty, fcntl, termios
m, s = pty.openpty()
name = os.ttyname(s)
pid = os.fork()
if pid == 0:
    os.setsid()
    fd = os.open(name, os.O_RDWR)
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b'x')
        os._exit(0)
    except OSError as e:
        os._exit(e.errno)
_, st = os.waitpid(pid, 0)
c = os.waitstatus_to_exitcode(st)
P('TIOCSTI on the controlling terminal', 'OK' if c == 0 else errno.errorcode.get(c, c))
