T('keyctl get session keyring', lambda: SC(250, 0, -3, 1))
T('add_key user', lambda: SC(248, b'user', b'gate-key', b'x', 1, -2))
T('request_key user', lambda: SC(249, b'user', b'gate-key', 0, 0))
