#!/usr/bin/env bash
# Fails when a tracked Markdown file names a path that does not exist, or when any tracked
# file points outside the repository (at the design notes or the seed it started from).
#
# Checked in every tracked *.md (fuzz/corpus aside):
#   - relative links [text](path), resolved against the file's folder (http(s), mailto and
#     #anchors ignored; a #fragment is stripped);
#   - repository paths anywhere in the text: a tracked top-level folder followed by a path
#     that ends in an extension or a `/` (`templates/registry.h`, `tests/codegen/`); a `*`
#     is a glob that must match something. Paths of build outputs (`build/...`,
#     `build-fuzz/...`) and of folders a user chooses (`deploy/`, `out/`) do not start with
#     a tracked folder, so they are not checked.
# Prints FILE:LINE: missing PATH for each, and exits 1 if there is any.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# What points outside the repository: the shared folder beside it and the old design notes.
outside_re='[.][.]/shared[^[:space:])`"]*|(LOWERING|DESIGN)[.]md'

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t md_files < <(git ls-files -- '*.md' ':!:fuzz/corpus/**')
  mapfile -t folders < <(git ls-files | awk -F/ 'NF > 1 { print $1 }' | sort -u)
  outside=$(git grep -n -o -I -E "$outside_re" -- . ':!:fuzz/corpus/**' || true)
else
  mapfile -t md_files < <(find . -name '*.md' -not -path './.git/*' -not -path './build*' \
    -not -path './fuzz/corpus/*' | sed 's|^\./||')
  mapfile -t folders < <(find . -mindepth 1 -maxdepth 1 -type d -not -name '.*' -not -name 'build*' \
    | sed 's|^\./||')
  outside=$(grep -rnoI -E "$outside_re" . --exclude-dir=.git --exclude-dir='build*' \
    --exclude-dir=corpus | sed 's|^\./||' || true)
fi

# Top-level folders a path may start with: tracked ones with plain names, never build*.
known=""
for f in "${folders[@]}"; do
  [[ $f =~ ^[A-Za-z0-9_-]+$ && $f != build* ]] && known+="${known:+|}$f"
done
[[ -n $known ]] || { echo "check_docs.sh: no tracked folders under $root" >&2; exit 1; }

status=0
if [[ -n $outside ]]; then
  while IFS=: read -r file line match; do
    echo "$file:$line: missing $match (outside the repository)"
  done <<<"$outside"
  status=1
fi

# One line per reference: "FILE<TAB>LINE<TAB>KIND<TAB>PATH", KIND "link" or "path".
refs=$(awk -v known="$known" '
  BEGIN {
    path_re = "(^|[^A-Za-z0-9_./~$*-])([.]/)?(" known ")/[A-Za-z0-9_./*-]*"
    link_re = "\\]\\([^)[:space:]]+\\)"
  }
  {
    s = $0
    while (match(s, link_re)) {
      target = substr(s, RSTART + 2, RLENGTH - 3)
      s = substr(s, RSTART + RLENGTH)
      if (target ~ /^(https?:|mailto:|#)/) continue
      sub(/#.*/, "", target)
      if (target != "") print FILENAME "\t" FNR "\tlink\t" target
    }
    s = $0
    while (match(s, path_re)) {
      p = substr(s, RSTART, RLENGTH)
      s = substr(s, RSTART + RLENGTH)
      sub(/^[^A-Za-z0-9_.]/, "", p)
      sub(/^[.]\//, "", p)
      sub(/[.]+$/, "", p)
      if (p ~ /\/$/ || p ~ /[.][A-Za-z0-9*]+$/) print FILENAME "\t" FNR "\tpath\t" p
    }
  }
' "${md_files[@]}")

shopt -s nullglob
while IFS=$'\t' read -r file line kind path; do
  [[ -z $file ]] && continue
  if [[ $kind == link ]]; then
    dir=$(dirname "$file")
    full="$dir/$path"
    [[ $path == /* ]] && full=".$path"
  else
    full=$path
  fi
  if [[ $full == *'*'* ]]; then
    matches=($full)
    ((${#matches[@]} > 0)) && continue
  elif [[ -e $full ]]; then
    continue
  fi
  echo "$file:$line: missing $path"
  status=1
done <<<"$refs"

exit $status
