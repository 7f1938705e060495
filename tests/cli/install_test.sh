#!/usr/bin/env bash
# Installing and packaging, checked from the outside: cmake --install into a
# DESTDIR, then cpack -G DEB, the .deb unpacked with dpkg-deb -x. It reuses
# the build directory it is given (CTest: build-asan, so the binary installed
# and packaged is the ASan one); nothing is compiled again, and cpack's
# preinstall step finds everything built. Every checker is also run on a
# planted fault (a page that disagrees, an extra file, a missing dependency,
# a wrong commit) and must fail it.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
BUILD=$(realpath "$1")
SRC=$(realpath "$2")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failures=0
passes=0
pass() { echo "ok: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL: $1" >&2; failures=$((failures + 1)); }
check() {  # check DESCRIPTION COMMAND...: passes when COMMAND succeeds
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
refuses() {  # refuses DESCRIPTION COMMAND...: a negative control, passes when COMMAND fails
  local what=$1
  shift
  if "$@" >/dev/null 2>&1; then fail "negative control not caught: $what"; else pass "negative control caught: $what"; fi
}

for tool in cmake cpack dpkg-deb dpkg-shlibdeps dpkg objdump ldd man git; do
  command -v "$tool" >/dev/null || { echo "FAIL: install_test needs '$tool' (tools/install-deps --tests)" >&2; exit 1; }
done

# What must be installed, from the sources rather than from the build: the
# subcommands main.cc dispatches to, and the docs.
mapfile -t COMMANDS < <(grep -o '{"[a-z-]*", effectfence::cli::run_' "$SRC/src/cli/main.cc" | sed 's/{"\([a-z-]*\)".*/\1/')
((${#COMMANDS[@]} >= 10)) && pass "main.cc names ${#COMMANDS[@]} subcommands" || fail "main.cc's subcommands not found"
PAGES=(effectfence)
for c in "${COMMANDS[@]}"; do PAGES+=("effectfence-$c"); done
VERSION=$(sed -n 's/.*kVersion = "\([^"]*\)".*/\1/p' "$SRC/src/cli/version.h")

expected_files() {  # expected_files PREFIX: every file an install puts under PREFIX, sorted
  local p
  echo "$1/bin/effectfence"
  for p in "${PAGES[@]}"; do echo "$1/share/man/man1/$p.1"; done
  echo "$1/share/doc/effectfence/README.md"
  for p in "$SRC"/docs/*.md; do echo "$1/share/doc/effectfence/docs/$(basename "$p")"; done
}
same_files() {  # same_files ROOT PREFIX: ROOT holds exactly the expected files under PREFIX, nothing else
  diff <(expected_files "$2" | sort) <(cd "$1" && find . -type f | sed 's|^\.||' | sort)
}

# The commit the binary must name: the source tree's, as the build saw it.
if git -C "$SRC" rev-parse --show-toplevel >/dev/null 2>&1 && [[ -e "$SRC/.git" ]]; then
  COMMIT=$(git -C "$SRC" rev-parse HEAD)
else
  COMMIT=unknown
fi
names_commit() {  # names_commit BINARY COMMIT
  local line
  line=$("$1" --version) || return 1
  [[ "$line" == "effectfence $VERSION (commit $2)" || "$line" == "effectfence $VERSION (commit $2-dirty)" ]] ||
    { echo "  --version printed: $line" >&2; return 1; }
}

# A page rendered by man, turned back into the --help it came from: the
# SYNOPSIS block's first line gets its "usage: " back in place of man's
# indent of 7, the DESCRIPTION block loses that indent. Trailing blanks are
# not compared (man drops them).
page_as_help() {  # page_as_help PAGE
  MANWIDTH=250 LC_ALL=C.UTF-8 man -l "$1" | awk '
    /^[A-Z][A-Z ]*$/ { section = $0; next }
    section == "SYNOPSIS" && !started { sub(/^       /, "usage: "); started = 1; print; next }
    section == "SYNOPSIS" { print; next }  # its other lines were printed at their own indent, less 7
    section == "DESCRIPTION" { sub(/^       /, ""); print }' |
    sed -e 's/[[:space:]]*$//' | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
}
page_name_line() {  # page_name_line PAGE: the NAME section's text
  MANWIDTH=250 LC_ALL=C.UTF-8 man -l "$1" | awk '/^NAME$/ {on = 1; next} /^[A-Z]/ {on = 0} on && NF {sub(/^ +/, ""); print}'
}
help_of() {  # help_of BINARY [COMMAND]: --help with this run's HOME written as ~, the way the pages print it
  local home=$WORK/home-of-the-reader
  env -u XDG_STATE_HOME -u EFFECTFENCE_LEDGER HOME="$home" "$@" --help | sed -e "s|$home|~|g" -e 's/[[:space:]]*$//' |
    sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
}
# What each page must say, from the binary (each --help run once: an ASan
# binary is slow to start): $WORK/want/PAGE.name (its NAME line) and
# $WORK/want/PAGE.help (the --help it renders back to).
expect_pages_of() {  # expect_pages_of BINARY
  local top c
  mkdir -p "$WORK/want"
  top=$(help_of "$1")
  echo "effectfence - $(sed -n '1s/^effectfence [^:]*: //p' <<<"$top")" >"$WORK/want/effectfence.name"
  tail -n +3 <<<"$top" >"$WORK/want/effectfence.help"  # the title line and its blank became the NAME
  for c in "${COMMANDS[@]}"; do
    awk -v c="$c" '/^commands:$/ {on = 1; next} on && $1 == c {sub(/^ +[^ ]+ +/, ""); print "effectfence-" c " - " $0; exit}' \
      <<<"$top" >"$WORK/want/effectfence-$c.name"
    help_of "$1" "$c" >"$WORK/want/effectfence-$c.help"
  done
}
page_matches() {  # page_matches PAGE NAME: PAGE renders as the NAME line and --help expected for page NAME
  [[ "$(page_name_line "$1")" == "$(cat "$WORK/want/$2.name")" ]] || { echo "  NAME: $(page_name_line "$1")" >&2; return 1; }
  diff "$WORK/want/$2.help" <(page_as_help "$1")
}
renders_cleanly() {  # renders_cleanly PAGE: man -l exits 0, prints the page, warns about nothing
  MANWIDTH=250 LC_ALL=C.UTF-8 man -l "$1" >"$WORK/rendered" 2>"$WORK/render.err" && [[ -s "$WORK/rendered" ]] &&
    [[ ! -s "$WORK/render.err" ]] || { cat "$WORK/render.err" >&2; return 1; }
}

# 1. cmake --install into a DESTDIR, at a prefix that is not the default.
ROOT=$WORK/root
DESTDIR=$ROOT cmake --install "$BUILD" --prefix /opt/effectfence >"$WORK/install.log" 2>&1
check "cmake --install with DESTDIR and --prefix succeeds" test $? -eq 0
check "the binary, every man page and the docs, and nothing else, under DESTDIR/PREFIX" \
  same_files "$ROOT" /opt/effectfence
touch "$ROOT/opt/effectfence/bin/catch_tests"
refuses "an extra installed file (a test binary)" same_files "$ROOT" /opt/effectfence
rm "$ROOT/opt/effectfence/bin/catch_tests"
rm "$ROOT/opt/effectfence/share/man/man1/effectfence-wrap.1"
refuses "a missing man page" same_files "$ROOT" /opt/effectfence
DESTDIR=$ROOT cmake --install "$BUILD" --prefix /opt/effectfence >/dev/null 2>&1
EF=$ROOT/opt/effectfence/bin/effectfence
check "the installed binary names the commit ($COMMIT)" names_commit "$EF" "$COMMIT"
refuses "--version checked against another commit" names_commit "$EF" 0000000000000000000000000000000000000000

# 2. Every page renders with man -l and says what --help says.
MAN=$ROOT/opt/effectfence/share/man/man1
expect_pages_of "$EF"
for p in "${PAGES[@]}"; do
  check "man -l renders $p(1)" renders_cleanly "$MAN/$p.1"
  check "$p(1) says what $(sed 's/-/ /' <<<"$p") --help says" page_matches "$MAN/$p.1" "$p"
done
sed 's/^Runs COMMAND/Starts COMMAND/' "$MAN/effectfence-wrap.1" >"$WORK/edited.1"
refuses "a page whose text was edited" page_matches "$WORK/edited.1" effectfence-wrap
refuses "a page checked against another command's --help" page_matches "$MAN/effectfence-stats.1" effectfence-fenced
sed 's/counters of a ledger/counters/' "$MAN/effectfence-stats.1" >"$WORK/renamed.1"
refuses "a page with another summary" page_matches "$WORK/renamed.1" effectfence-stats
sed '/^\.fi$/,$d' "$MAN/effectfence-verify.1" >"$WORK/cut.1"
refuses "a page cut short" page_matches "$WORK/cut.1" effectfence-verify

# 3. The .deb: cpack as a user runs it, into a directory of its own.
cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$WORK/pkg" >"$WORK/cpack.log" 2>&1
rc=$?
check "cpack -G DEB succeeds" test $rc -eq 0
((rc == 0)) || cat "$WORK/cpack.log" >&2
DEB=$(find "$WORK/pkg" -maxdepth 1 -name "effectfence_${VERSION}_*.deb" | head -1)
check "the package is effectfence_${VERSION}_ARCH.deb" test -f "$DEB"
dpkg-deb -x "$DEB" "$WORK/deb"
check "the .deb holds /usr/bin/effectfence, every man page and the docs, and nothing else" same_files "$WORK/deb" /usr
check "the .deb's pages are the installed pages" diff -r "$MAN" "$WORK/deb/usr/share/man/man1"
DEPENDS=$(dpkg-deb -f "$DEB" Depends)
echo "  Depends: $DEPENDS"

# Each library the binary links (NEEDED) belongs to a package the .deb depends on.
owner_of() {  # owner_of LIBRARY_PATH: the Debian package holding it (usr-merged or not)
  local path=$1 candidate
  for candidate in "$path" "$(realpath "$path")" "/usr${path#/usr}" "${path#/usr}"; do
    dpkg -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1 && return 0
  done
  return 1
}
depends_on() {  # depends_on PACKAGE DEPENDS: PACKAGE is one of DEPENDS' entries (any version)
  local entry
  while read -r entry; do [[ "${entry%% *}" == "$1" ]] && return 0; done < <(tr ',|' '\n\n' <<<"$2" | sed 's/^ *//')
  return 1
}
depends_cover_links() {  # depends_cover_links BINARY DEPENDS
  local lib path pkg ok=0
  for lib in $(objdump -p "$1" | awk '$1 == "NEEDED" {print $2}'); do
    path=$(ldd "$1" | awk -v l="$lib" '$1 == l && $2 == "=>" {print $3}')
    pkg=$(owner_of "$path") || { echo "  $lib ($path) belongs to no package" >&2; ok=1; continue; }
    depends_on "$pkg" "$2" || { echo "  $lib is in $pkg, not in Depends" >&2; ok=1; }
  done
  return $ok
}
DEB_EF=$WORK/deb/usr/bin/effectfence
check "Depends names the package of every library the binary links" depends_cover_links "$DEB_EF" "$DEPENDS"
refuses "Depends without libsqlite3-0" depends_cover_links "$DEB_EF" "$(sed 's/libsqlite3-0[^,]*, //' <<<"$DEPENDS")"
refuses "Depends without libbotan-2-19" depends_cover_links "$DEB_EF" "$(sed 's/libbotan-2-19[^,]*, //' <<<"$DEPENDS")"
refuses "Depends without libstdc++6" depends_cover_links "$DEB_EF" "$(sed 's/libstdc++6[^,]*, //' <<<"$DEPENDS")"

# 4. The unpacked binary runs: it names its commit and the demo succeeds.
check "the packaged binary names the commit ($COMMIT)" names_commit "$DEB_EF" "$COMMIT"
"$DEB_EF" demo >"$WORK/demo.out" 2>&1
rc=$?
check "the packaged binary's demo exits 0" test $rc -eq 0
((rc == 0)) || tail -20 "$WORK/demo.out" >&2
check "the packaged demo: one charge through wrap" grep -q "through effectfence wrap:   1 charge" "$WORK/demo.out"

# 5. A tree that is not a git checkout builds as commit "unknown": an unpacked
#    tarball, alone or inside another repository.
commit_written() {  # commit_written SOURCE_DIR: the commit build_commit.cmake writes for it
  cmake -DSOURCE_DIR="$1" -DOUT="$WORK/build_commit.cc" -P "$SRC/cmake/build_commit.cmake" >/dev/null &&
    sed -n 's/.*kBuildCommit = "\([^"]*\)".*/\1/p' "$WORK/build_commit.cc"
}
mkdir -p "$WORK/tarball" "$WORK/outer/effectfence-$VERSION"
git -C "$WORK/outer" init -q && git -C "$WORK/outer" -c user.name=t -c user.email=t@t commit -q --allow-empty -m outer
check "an unpacked tarball builds as commit unknown" test "$(commit_written "$WORK/tarball")" = unknown
check "a tarball inside another repository builds as commit unknown, not the other's" \
  test "$(commit_written "$WORK/outer/effectfence-$VERSION")" = unknown
check "a checkout builds as its HEAD" test "$(commit_written "$WORK/outer")" = "$(git -C "$WORK/outer" rev-parse HEAD)"

echo "$passes passed, $failures failed"
exit $((failures > 0))
