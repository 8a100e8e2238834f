mkdir -p /workspace/big && yes '/a-long-ignore-pattern-that-git-must-keep-in-memory-*.o' | head -c 160M > /workspace/big/.gitignore
