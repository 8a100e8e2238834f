sleep 3600.$0 & (setsid sleep 3600.$1 &); echo looping; while :; do :; done
