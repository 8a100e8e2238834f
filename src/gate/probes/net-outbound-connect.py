import threading
def _tcp(label, host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(4)
    try:
        s.connect((host, port))
        P(label, 'OK connected')
    except socket.timeout:
        P(label, 'timeout')
    except BaseException as e:
        P(label, _en(e))
    finally:
        s.close()
def SEND_ALL(targets):
    for h, p in targets:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for _ in range(3): s.sendto(b'motor-gate', (h, p))
        except BaseException:
            pass
        finally:
            s.close()
def CONNECT_ALL(targets):
    ts = [threading.Thread(target=_tcp, args=('tcp %s:%d' % (h, p), h, p)) for h, p in targets]
    for t in ts: t.start()
    for t in ts: t.join()
SEND_ALL(SENDS)
CONNECT_ALL(TARGETS)
