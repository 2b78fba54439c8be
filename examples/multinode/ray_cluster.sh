#!/usr/bin/env bash
# Start, inspect or stop a Ray cluster over a list of hosts, for `areal-mem train launcher.kind=ray`.
#
# usage: ray_cluster.sh HOSTFILE start|stop|status|address
#   HOSTFILE  one host per line (blank lines and # comments skipped); the first one is the head
#   start     head first, then every other host joins it; waits until all nodes are up
#   stop      `ray stop` on every host (workers first)
#   status    `ray status` of the cluster
#   address   print HEAD_IP:PORT (for launcher.ray_address)
#
# Environment:
#   AREAL_MEM_DIR   the repository on every node (default: this checkout); its .venv runs Ray
#   RAY_PORT        the head's port (default 6379)
#   HEAD_IP         the head's address as the other nodes reach it (default: resolved from its name)
#   REMOTE          how a command reaches a host: ssh (default), srun (inside a Slurm job), or
#                   local (every host is this machine: to try the script out)
#   RAY_BLOCK       1: keep `ray start --block` running in the background (default 1 with srun,
#                   whose steps kill daemons when they end; 0 otherwise)
#   RAY_START_ARGS  extra `ray start` arguments for every node, e.g. "--num-gpus=8 --num-cpus=64"
#   DRY_RUN         1: print the commands instead of running them
#
# The cluster runs with Ray's token authentication (RAY_AUTH_MODE=token). The token lives in
# ~/.ray/auth_token (made here once if missing) and reaches each node on stdin, never on a
# command line. areal-mem's own services get a separate token per run from the launcher.
set -euo pipefail

usage="usage: $0 HOSTFILE start|stop|status|address"
hostfile=${1:?$usage}
action=${2:?$usage}
[[ -r $hostfile ]] || { echo "$0: cannot read host file '$hostfile'" >&2; exit 2; }
mapfile -t hosts < <(grep -v -E '^[[:space:]]*(#|$)' "$hostfile" | awk '{print $1}')
(( ${#hosts[@]} )) || { echo "$0: no hosts in '$hostfile'" >&2; exit 2; }

dir=${AREAL_MEM_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
port=${RAY_PORT:-6379}
remote=${REMOTE:-ssh}
block=${RAY_BLOCK:-$([[ $remote == srun ]] && echo 1 || echo 0)}
head=${hosts[0]}
head_ip=${HEAD_IP:-$(getent hosts "$head" | awk '{print $1; exit}' || true)}
head_ip=${head_ip:-$head}
ray="$dir/.venv/bin/ray"
token_file="$HOME/.ray/auth_token"

# on HOST CMD: run the shell command CMD on HOST (stdin goes along)
on() {
  if [[ ${DRY_RUN:-0} == 1 ]]; then
    echo "[$1] $2"
    cat >/dev/null
    return
  fi
  case $remote in
    ssh) ssh -o BatchMode=yes "$1" "$2" ;;
    srun) srun --nodes=1 --ntasks=1 --overlap -w "$1" bash -c "$2" ;;
    local) bash -c "$2" ;;
    *) echo "$0: REMOTE must be ssh, srun or local, not '$remote'" >&2; exit 2 ;;
  esac
}

# Debian maps a host's own name to 127.0.1.1: then ask the head for its first real address
if [[ $head_ip == 127.* && $remote != local && ${DRY_RUN:-0} != 1 && -z ${HEAD_IP:-} ]]; then
  head_ip=$(on "$head" "hostname -I | awk '{print \$1}'" < /dev/null)
fi

ensure_token() {
  [[ -s $token_file ]] && return
  (umask 077 && mkdir -p "$(dirname "$token_file")" &&
   "$dir/.venv/bin/python" -c 'import secrets; print(secrets.token_hex(32))' > "$token_file")
}

# through a new file, so a shared home (the same file as the source) is not truncated first
push_token='umask 077 && mkdir -p ~/.ray && cat > ~/.ray/auth_token.new && mv ~/.ray/auth_token.new ~/.ray/auth_token'

start_node() {  # HOST RAY_START_ARGS...
  local host=$1; shift
  on "$host" "$push_token" < "$token_file"
  local cmd="cd '$dir' && RAY_AUTH_MODE=token '$ray' start --disable-usage-stats $*${RAY_START_ARGS:+ $RAY_START_ARGS}"
  if [[ $block == 1 ]]; then
    on "$host" "$cmd --block" < /dev/null &
  else
    on "$host" "$cmd" < /dev/null
  fi
}

wait_for_nodes() {  # until all hosts have joined, at most 300 s
  [[ ${DRY_RUN:-0} == 1 ]] && return
  RAY_AUTH_MODE=token "$dir/.venv/bin/python" - "$head_ip:$port" "${#hosts[@]}" <<'EOF'
import sys, time
import ray
address, want = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 300
while True:
    try:
        ray.init(address=address, log_to_driver=False)
        break
    except ConnectionError:
        if time.time() > deadline:
            sys.exit(f"no Ray head at {address} after 300 s")
        time.sleep(2)
while (alive := sum(n["Alive"] for n in ray.nodes())) < want:
    if time.time() > deadline:
        sys.exit(f"only {alive} of {want} nodes joined {address} in 300 s")
    time.sleep(2)
print(f"ray cluster at {address}: {alive} nodes, {ray.cluster_resources()}")
EOF
}

case $action in
  start)
    ensure_token
    start_node "$head" --head --port="$port" --node-ip-address="$head_ip" --include-dashboard=false
    for host in "${hosts[@]:1}"; do
      start_node "$host" --address="$head_ip:$port"
    done
    wait_for_nodes
    echo "run: RAY_AUTH_MODE=token $dir/.venv/bin/areal-mem train --config CONFIG launcher.kind=ray launcher.ray_address=$head_ip:$port"
    ;;
  stop)
    for (( i=${#hosts[@]}-1; i>=0; i-- )); do
      on "${hosts[i]}" "'$ray' stop" < /dev/null || echo "$0: ray stop failed on ${hosts[i]}" >&2
    done
    ;;
  status)
    on "$head" "RAY_AUTH_MODE=token '$ray' status --address='$head_ip:$port'" < /dev/null ;;
  address)
    echo "$head_ip:$port" ;;
  *)
    echo "$usage" >&2; exit 2 ;;
esac
