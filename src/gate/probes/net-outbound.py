def tcp(host, port, fam):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, port))
    finally:
        s.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b'x', ('192.0.2.1', 53))
    finally:
        s.close()
T('tcp 192.0.2.1:80', lambda: tcp('192.0.2.1', 80, socket.AF_INET))
T('tcp [2001:db8::1]:80', lambda: tcp('2001:db8::1', 80, socket.AF_INET6))
T('udp 192.0.2.1:53', udp)
