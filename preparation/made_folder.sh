#!/usr/bin/env bash
# The mark of a folder the harness made, checked before a recipe removes or empties one that a variable names:
#
#   bash preparation/made_folder.sh check VAR PURPOSE [STAMP]   exit 0 when the folder $VAR may be removed
#   bash preparation/made_folder.sh mark VAR PURPOSE            mark the folder $VAR as made for PURPOSE
#
# A folder may be removed when it is absent, or a real folder (not a link) that carries the mark file
# .made-by-dflash-bench naming PURPOSE (chip-compile, device-machine, device-site, ...), or, made before the mark
# existed, the stamp file its maker wrote (STAMP, default <PURPOSE>.txt, as chip-compile and device-preflight wrote). Anything else is
# refused with one line naming the variable and the fix, exit 2: a user's folder, a file, a link, the project's
# own .venv (marked by bootstrap, not for PURPOSE), the checkout or a folder above it.
set -uo pipefail

MARK=.made-by-dflash-bench
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
action="${1:-}" var="${2:-}" purpose="${3:-}" stamp="${4:-${3:-}.txt}"
[ -n "$var" ] && [ -n "$purpose" ] || { echo "usage: made_folder.sh check|mark VAR PURPOSE [STAMP]" >&2; exit 2; }
path="${!var:-}"
refuse() {
  local shown="$path"
  [ "${#shown}" -gt 80 ] && shown="${shown:0:80}... (${#path} characters)"
  echo "error: $var=$shown: $*" >&2
  exit 2
}

case "$action" in
  check)
    [ -n "$path" ] || refuse "empty; give a folder for $purpose (or leave $var unset for its default)"
    [ -L "$path" ] && refuse "a link; $purpose removes and rebuilds this folder, and never through a link: give a" \
      "folder path of its own"
    [ -e "$path" ] || exit 0
    [ -d "$path" ] || refuse "a file stands there; give a path for the $purpose folder that is free or was made by it"
    real="$(cd "$path" && pwd -P)"
    case "$ROOT/" in "$real"/*) refuse "the checkout or a folder above it; give a folder of its own for $purpose" ;; esac
    if [ -f "$path/$MARK" ] && [ "$(cat "$path/$MARK")" = "$purpose" ]; then exit 0; fi
    [ ! -f "$path/$MARK" ] && [ -f "$path/$stamp" ] && exit 0
    made="$([ -f "$path/$MARK" ] && echo "the harness made for $(head -c 80 "$path/$MARK")" || echo "with no mark of $purpose")"
    refuse "a folder $made, which $purpose would remove to build its own; give a new path (or one $purpose made)," \
      "or remove it yourself if it may go"
    ;;
  mark)
    [ -d "$path" ] && [ ! -L "$path" ] || refuse "no folder to mark"
    printf '%s\n' "$purpose" >"$path/$MARK"
    ;;
  *) echo "usage: made_folder.sh check|mark VAR PURPOSE [STAMP]" >&2; exit 2 ;;
esac
