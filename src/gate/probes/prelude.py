import os, sys, errno, socket, ctypes, time, subprocess
def _en(e):
    if isinstance(e, socket.gaierror):
        return 'EAI(%s)' % e.errno
    if isinstance(e, OSError) and e.errno:
        return errno.errorcode.get(e.errno, 'E%d' % e.errno)
    return type(e).__name__
def P(label, value):
    print('%s=%s' % (label, value), flush=True)
def T(label, f):
    try:
        r = f()
        P(label, 'OK' if r is None else 'OK %s' % (r,))
    except BaseException as e:
        P(label, _en(e))
def W(path, keep=False):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.close(fd)
    if not keep:
        os.unlink(path)
def R(path):
    with open(path, 'rb') as f:
        return '(read %d bytes)' % len(f.read(1 << 20))
def OW(path):
    os.close(os.open(path, os.O_WRONLY))
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def SC(nr, *args):
    a = [ctypes.c_long(x) if isinstance(x, int) else x for x in args]
    r = _libc.syscall(ctypes.c_long(nr), *a)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return None
def C(label, f):
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            f()
        except OSError as e:
            code = e.errno if e.errno and 0 < e.errno < 250 else 250
        except BaseException:
            code = 251
        os._exit(code)
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st):
        P(label, 'killed by signal %d' % os.WTERMSIG(st))
        return
    c = os.WEXITSTATUS(st)
    P(label, 'OK' if c == 0 else 'ERROR' if c >= 250 else errno.errorcode.get(c, 'E%d' % c))
def RUN(label, argv):
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
        out = p.stdout.decode('utf-8', 'replace').strip().replace('\n', ' | ')[:160]
        P(label, ('OK' if p.returncode == 0 else 'failed (exit %d)' % p.returncode) + (': ' + out if out else ''))
    except BaseException as e:
        P(label, 'failed (%s)' % _en(e))
