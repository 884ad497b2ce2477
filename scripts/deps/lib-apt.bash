# Sourced by scripts in scripts/deps: `need_apt PROGRAM PACKAGE…` installs the Debian
# packages when PROGRAM is not on the PATH (one `apt-get update` per run at most).
need_apt() {
  local program=$1
  shift
  if command -v "$program" >/dev/null 2>&1; then
    return 0
  fi
  local sudo=
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  if [ -z "${BOURSE_APT_UPDATED:-}" ]; then
    $sudo apt-get update -qq
    export BOURSE_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@"
}
