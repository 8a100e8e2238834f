os.symlink('/root', '/workspace/' + A)
os.symlink('/nonexistent-gate-' + M, '/workspace/' + B)
P('planted', 'yes')
