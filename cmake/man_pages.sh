#!/usr/bin/env bash
# Writes the man pages, effectfence.1 and one effectfence-COMMAND.1 per
# subcommand, into OUT_DIR from the binary's own --help texts, so a page and
# the --help it documents never disagree. The subcommands are the ones the
# binary's --help lists. Each --help runs with HOME set to a marker that the
# pages print as ~, so a page does not name the home of whoever built it.
#   man_pages.sh EFFECTFENCE OUT_DIR
# REQUIRES: EFFECTFENCE runs on this machine (the pages are made at build time).
set -euo pipefail
if (($# != 2)); then
  echo "usage: man_pages.sh EFFECTFENCE OUT_DIR" >&2
  exit 2
fi
ef=$1
out=$2
home_marker=/effectfence-man-page-home

help_text() {  # help_text [COMMAND]: that command's --help, or the program's
  local text
  text=$(env -u XDG_STATE_HOME -u EFFECTFENCE_LEDGER HOME="$home_marker" "$ef" "$@" --help) || {
    echo "man_pages.sh: '$ef $* --help' failed" >&2
    return 1
  }
  printf '%s\n' "${text//$home_marker/\~}"
}

# Text to roff, printed as is: escapes first, then the characters groff
# would otherwise turn into typographic ones, then control lines.
roff() {
  sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/'/\\\\(aq/g" -e 's/`/\\(ga/g' \
      -e 's/\^/\\(ha/g' -e 's/~/\\(ti/g' -e 's/^\./\\\&./'
}

# write_page NAME SUMMARY VERSION HELP_TEXT SEE_ALSO...: HELP_TEXT begins with
# the usage lines (up to the first blank line): they become the SYNOPSIS,
# without "usage: ", and the rest the DESCRIPTION, both verbatim.
write_page() {
  local name=$1 summary=$2 version=$3 text=$4
  shift 4
  if [[ "$text" != "usage: "* ]]; then
    echo "man_pages.sh: '$name --help' does not begin with 'usage: '" >&2
    return 1
  fi
  local synopsis=${text%%$'\n\n'*} description=""
  [[ "$text" == *$'\n\n'* ]] && description=${text#*$'\n\n'}
  {
    printf '.TH %s 1 "" "effectfence %s" "effectfence manual"\n' "$(printf '%s' "${name^^}" | roff)" "$version"
    printf '.SH NAME\n%s \\- %s\n' "$(printf '%s' "$name" | roff)" "$(printf '%s' "$summary" | roff)"
    printf '.SH SYNOPSIS\n.nf\n'
    printf '%s\n' "$synopsis" | sed -e '1s/^usage: //' -e '2,$s/^       //' | roff
    printf '.fi\n'
    if [[ -n "$description" ]]; then
      printf '.SH DESCRIPTION\n.nf\n'
      printf '%s\n' "$description" | roff
      printf '.fi\n'
    fi
    printf '.SH SEE ALSO\n'
    local see
    for see in "$@"; do printf '.BR %s (1)\n' "$(printf '%s' "$see" | roff)"; done
  } >"$out/$name.1.tmp"
  mv "$out/$name.1.tmp" "$out/$name.1"
}

mkdir -p "$out"
rm -f "$out"/*.1  # a page for a subcommand that is gone must not stay
top=$(help_text)
# The first line: "effectfence VERSION: SUMMARY".
title=${top%%$'\n'*}
if [[ ! "$title" =~ ^effectfence\ ([^:]+):\ (.+)$ ]]; then
  echo "man_pages.sh: unexpected first line of 'effectfence --help': $title" >&2
  exit 1
fi
version=${BASH_REMATCH[1]}
summary=${BASH_REMATCH[2]}
# The subcommands: "  NAME  SUMMARY" lines after "commands:", up to a blank line.
mapfile -t commands < <(printf '%s\n' "$top" | awk '/^commands:$/ {on = 1; next} on && /^$/ {exit} on {print}')
if ((${#commands[@]} == 0)); then
  echo "man_pages.sh: 'effectfence --help' lists no commands" >&2
  exit 1
fi
names=()
for line in "${commands[@]}"; do
  [[ "$line" =~ ^\ \ ([a-z][a-z-]*)\ +(.+)$ ]] || { echo "man_pages.sh: unexpected command line: $line" >&2; exit 1; }
  names+=("effectfence-${BASH_REMATCH[1]}")
done

write_page effectfence "$summary" "$version" "${top#*$'\n\n'}" "${names[@]}"
for line in "${commands[@]}"; do
  [[ "$line" =~ ^\ \ ([a-z][a-z-]*)\ +(.+)$ ]]
  command=${BASH_REMATCH[1]}
  write_page "effectfence-$command" "${BASH_REMATCH[2]}" "$version" "$(help_text "$command")" effectfence
done
