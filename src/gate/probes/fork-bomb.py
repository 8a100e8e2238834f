import threading
threading.stack_size(65536)
ev = threading.Event()
made, err = 0, 'none'
while made < TARGET:
    try:
        t = threading.Thread(target=ev.wait, daemon=True)
        t.start()
        made += 1
    except BaseException as e:
        err = '%s: %s' % (_en(e), str(e)[:60])
        break
P('threads', made)
P('thread_error', err)
def fork_once():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
T('fork at the limit', fork_once)
ev.set()
