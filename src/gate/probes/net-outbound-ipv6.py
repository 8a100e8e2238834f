T('ipv6 addresses', lambda: len(open('/proc/net/if_inet6').read().split()))
def c6(host):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        s.connect((host, 80))
    finally:
        s.close()
T('udp connect [::1]:80', lambda: c6('::1'))
T('udp connect [2001:db8::1]:80', lambda: c6('2001:db8::1'))
