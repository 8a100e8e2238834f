T('create /workspace/../' + NAME, lambda: W('/workspace/../' + NAME, True))
T('create /workspace/../../../tmp/../' + NAME, lambda: W('/workspace/../../../tmp/../' + NAME, True))
