T('socket(AF_VSOCK, SOCK_STREAM)', lambda: SC(41, 40, 1, 0))
