RUN('id -u', [ID, '-u'])
RUN('id', [ID])
