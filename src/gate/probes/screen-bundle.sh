set -e
d=$(mktemp -d) && cd "$d" && export HOME="$d"
export GIT_AUTHOR_NAME=gate GIT_AUTHOR_EMAIL=gate@localhost GIT_COMMITTER_NAME=gate GIT_COMMITTER_EMAIL=gate@localhost
git init -q . && echo '# docs' > README.md && git add README.md && git commit -qm base
base=$(git rev-parse HEAD)
echo 'fn main() { std::fs::write("/workspace/canary", "ran").unwrap(); }' > build.rs
git add build.rs && git commit -qm change && git update-ref refs/motor/synthetic HEAD
git bundle create -q "/workspace/$0" refs/motor/synthetic
echo "$base $(git rev-parse HEAD) $(git rev-parse 'HEAD^{tree}')"
