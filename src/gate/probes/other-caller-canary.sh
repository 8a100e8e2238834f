printf '%s' "$0" > secret.txt && chmod 0644 secret.txt
