b = b'x' * (256 << 20)
P('survived', len(b))
