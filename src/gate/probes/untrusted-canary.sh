echo ran > /workspace/$0
