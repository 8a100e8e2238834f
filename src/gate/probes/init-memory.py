T('open /proc/1/mem for writing', lambda: os.close(os.open('/proc/1/mem', os.O_RDWR)))
T('read /proc/1/environ', lambda: R('/proc/1/environ'))
T('readlink /proc/1/exe', lambda: os.readlink('/proc/1/exe'))
