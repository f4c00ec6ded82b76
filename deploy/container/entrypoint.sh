#!/usr/bin/env bash
# Entrypoint of the node's container image (Containerfile). Commands:
#   node (default)   check that the config is mounted, then run the node
#                    (`interchange broker --config $INTERCHANGE_CONFIG`) as PID 1's exec: SIGTERM stops it cleanly
#   interop ARGS...  run the interop kit (`interchange interop ARGS`), e.g. against a neighbour
#   pki ARGS...      the session-level PKI tool (`interchange pki ARGS`)
#   anything else    executed as given (a shell, for debugging)
# Environment: INTERCHANGE_CONFIG (default /etc/interchange/node.toml), INTERCHANGE_BIN (default
# /opt/venv/bin/interchange). Exit status 2 with a message when a mounted file is missing.
set -euo pipefail
config=${INTERCHANGE_CONFIG:-/etc/interchange/node.toml}
bin=${INTERCHANGE_BIN:-/opt/venv/bin/interchange}

fail() { echo "entrypoint: $*" >&2; exit 2; }

check_node() {
  [ -r "$config" ] || fail "config $config not found or not readable: mount it (see deploy/container/compose.yaml)"
  [ -x "$bin" ] || fail "$bin is missing: this image was not built from deploy/container/Containerfile"
  # The node itself validates the config and names any missing TLS file or unusable directory.
}

command=${1:-node}
case "$command" in
  node)
    check_node
    exec "$bin" broker --config "$config" ;;
  interop | pki)
    shift
    exec "$bin" "$command" "$@" ;;
  *)
    exec "$@" ;;
esac
