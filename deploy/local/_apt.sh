# Sourced, not run: the one way the installers here install Debian packages for tests.
#
# apt_install required|optional WHAT USERS LOG PACKAGE...
#   As root where apt-get exists, installs PACKAGE... (output in .venv/LOG.log). Elsewhere
#   it says WHAT is missing, that USERS will skip and how to install as root, and returns 0.
#   A failed install shows the log's tail; "required" then exits 1 (CI must not skip),
#   "optional" says USERS will skip and returns 0.
apt_install() {
  local mode=$1 what=$2 users=$3 log=.venv/$4.log
  shift 4
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "no $what: $users will skip (as root: $0)" >&2
    return 0
  fi
  mkdir -p .venv
  echo "installing $what for $users (first run only; log: $log)..." >&2
  if { apt-get update &&
       DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"; } \
     > "$log" 2>&1; then
    return 0
  fi
  if [ "$mode" = required ]; then
    tail -n 30 "$log" >&2
    exit 1
  fi
  tail -n 10 "$log" >&2
  echo "could not install $what: $users will skip" >&2
}
