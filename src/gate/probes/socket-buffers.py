socket.setdefaulttimeout(5)
buf = b'x' * 65536
socks = []
srv = socket.socket()
srv.bind(('127.0.0.1', 0))
srv.listen(512)
tcp = 0
while tcp < CEILING and len(socks) < 600:
    c = socket.socket()
    c.connect(srv.getsockname())
    s, _ = srv.accept()
    c.setblocking(False)
    socks += [c, s]
    sent = 0
    try:
        while tcp < CEILING:
            n = c.send(buf)
            sent += n
            tcp += n
    except OSError:
        pass
    if sent < 65536:
        break
P('tcp queued MiB', tcp >> 20)
for x in socks:
    x.close()
socks = []
time.sleep(0.5)  # the closed connections' buffers are freed (and uncharged) first
def udp_queued():
    total = 0
    for line in open('/proc/net/udp').read().splitlines()[1:]:
        total += int(line.split()[4].split(':')[1], 16)
    return total
udp = 0
while udp < CEILING and len(socks) < 1200:
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)
    r.bind(('127.0.0.1', 0))
    w = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    w.setblocking(False)
    socks += [r, w]
    before = udp_queued()
    for i in range(256):
        try:
            w.sendto(buf[:60000], r.getsockname())
        except OSError:
            break
    udp = udp_queued()
    if udp - before < 65536:
        break
P('udp queued MiB', udp >> 20)
