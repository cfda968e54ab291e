# Sourced by up: what --secrets DIR turns on (see up --help and docs/containers.md).
# check_secrets DIR  refuses a DIR up cannot use, before anything starts.
# load_secrets DIR   copies DIR's files into the volume $name-secrets (uid 10001, mode
#                    400: the host's files may be root's, mode 600) and sets
#   NODE_ENV, SUPERVISOR_ENV  the mount and NIMBUS_* variables of replicas, supervisors
#   PROBE_TLS                 the readiness probe's TLS arguments (@IP@: the replica's)
#   CLIENT_FLAGS              what the host's CLI needs (printed by up)
SECRET_FILES=(token zk-auth tls.crt tls.key ca.crt tls-server-name)
SECRETS_AT=/etc/nimbus-secrets
NODE_ENV=() SUPERVISOR_ENV=() PROBE_TLS=() CLIENT_FLAGS=()

check_secrets() {
  local dir=$1 f found=0
  [ -n "$dir" ] || return 0
  if [ ! -d "$dir" ] || [ ! -x "$dir" ]; then
    echo "up: --secrets $dir: not a folder this user ($(id -un)) can open" >&2; exit 2
  fi
  for f in "$dir"/* "$dir"/.[!.]*; do
    [ -e "$f" ] || continue
    case " ${SECRET_FILES[*]} " in
      *" $(basename "$f") "*) found=$((found + 1)) ;;
      *) echo "up: --secrets $dir: ignoring $(basename "$f") (known: ${SECRET_FILES[*]})" >&2 ;;
    esac
  done
  if [ "$found" = 0 ]; then
    echo "up: --secrets $dir holds none of ${SECRET_FILES[*]}" >&2; exit 2
  fi
  if { [ -e "$dir/tls.crt" ] && [ ! -e "$dir/tls.key" ]; } ||
     { [ ! -e "$dir/tls.crt" ] && [ -e "$dir/tls.key" ]; }; then
    echo "up: --secrets $dir: TLS needs both tls.crt and tls.key" >&2; exit 2
  fi
  if [ ! -e "$dir/tls.crt" ] && { [ -e "$dir/ca.crt" ] || [ -e "$dir/tls-server-name" ]; }; then
    echo "up: --secrets $dir: ca.crt and tls-server-name need TLS on: add tls.crt and tls.key" >&2
    exit 2
  fi
}

load_secrets() {
  local dir=$1 vol=$name-secrets server_name said status=0
  [ -n "$dir" ] || return 0
  dir=$(cd "$dir" && pwd)
  "$ENGINE" volume inspect "$vol" >/dev/null 2>&1 ||
    "$ENGINE" volume create "${label[@]}" --label "nimbus.secrets=$name" "$vol" >/dev/null
  # Copied by root in a throwaway container: it reads files the host's root owns with
  # mode 600 (rootless podman: files of the user running up), and hands them to uid 10001.
  said=$("$ENGINE" run --rm --network none --user 0 --entrypoint sh \
    -v "$vol:/s" -v "$dir:/in:ro" "$image" -c '
      set -e
      find /s -mindepth 1 -delete
      for f in "$@"; do [ ! -e "/in/$f" ] || cp "/in/$f" "/s/$f"; done
      chown -R 10001:10001 /s && chmod 0500 /s && chmod 0400 /s/*
      [ ! -e /s/tls-server-name ] || tr -d " \t\r\n" </s/tls-server-name' \
    sh "${SECRET_FILES[@]}" 2>&1) || status=$?
  if [ "$status" != 0 ]; then
    echo "$said" >&2
    echo "up: --secrets $dir: the copy for the containers failed: run up as root, or (rootless)" \
      "make the files readable by $(id -un)" >&2
    exit 1
  fi
  server_name=$said
  NODE_ENV=(-v "$vol:$SECRETS_AT:ro") SUPERVISOR_ENV=(-v "$vol:$SECRETS_AT:ro")
  if [ -e "$dir/token" ]; then
    NODE_ENV+=(-e "NIMBUS_TOKEN_FILE=$SECRETS_AT/token")
    SUPERVISOR_ENV+=(-e "NIMBUS_TOKEN_FILE=$SECRETS_AT/token")
    CLIENT_FLAGS+=(--token-file "$dir/token")
  fi
  if [ -e "$dir/zk-auth" ]; then
    NODE_ENV+=(-e "NIMBUS_ZK_AUTH_FILE=$SECRETS_AT/zk-auth")
    SUPERVISOR_ENV+=(-e "NIMBUS_ZK_AUTH_FILE=$SECRETS_AT/zk-auth")
  fi
  [ -e "$dir/tls.crt" ] || return 0
  NODE_ENV+=(-e "NIMBUS_TLS_CERT=$SECRETS_AT/tls.crt" -e "NIMBUS_TLS_KEY=$SECRETS_AT/tls.key")
  SUPERVISOR_ENV+=(-e NIMBUS_TLS=true)
  CLIENT_FLAGS+=(--tls true)
  PROBE_TLS=(-)
  if [ -e "$dir/ca.crt" ]; then
    NODE_ENV+=(-e "NIMBUS_TLS_CA=$SECRETS_AT/ca.crt")
    SUPERVISOR_ENV+=(-e "NIMBUS_TLS_CA=$SECRETS_AT/ca.crt")
    CLIENT_FLAGS+=(--tls-ca "$dir/ca.crt")
    PROBE_TLS=("$SECRETS_AT/ca.crt")
  fi
  if [ -n "$server_name" ]; then
    NODE_ENV+=(-e "NIMBUS_TLS_SERVER_NAME=$server_name")
    SUPERVISOR_ENV+=(-e "NIMBUS_TLS_SERVER_NAME=$server_name")
    CLIENT_FLAGS+=(--tls-server-name "$server_name")
    PROBE_TLS+=("$server_name")
  else
    PROBE_TLS+=(@IP@)  # the certificate names the replicas' addresses
  fi
}
