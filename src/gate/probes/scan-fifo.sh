mkdir -p /workspace/untracked && mkfifo /workspace/untracked/.gitignore && echo more >> /workspace/README.md
