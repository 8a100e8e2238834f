T('list /root', lambda: len(os.listdir('/root')))
