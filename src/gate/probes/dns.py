Q = b'\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01'
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    try:
        s.connect((NS, 53))
        s.send(Q)
        return 'answered (%d bytes)' % len(s.recv(512))
    finally:
        s.close()
def tcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((NS, 53))
    finally:
        s.close()
T('getaddrinfo example.com', lambda: socket.getaddrinfo('example.com', 80)[0][4][0])
T('udp query to the host resolver', udp)
T('tcp connect to the host resolver', tcp)
T('read /etc/resolv.conf', lambda: R('/etc/resolv.conf'))
