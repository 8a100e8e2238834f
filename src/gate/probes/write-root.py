T('create in /', lambda: W('/gate-probe'))
