# The deployed topology on loopback (scripts/up --topology, scripts/topology-test): the
# edge nginx of deploy/nginx/nginx.conf rendered for loopback in front of two instances
# of every service, an internal balancer for the gateways' calls to auth and turn-cred,
# and the stores. Source after lib.sh, do not run.

TOPOLOGY="$DATA/topology"
TOPOLOGY_EDGE_PORT="${WHISPER_EDGE_PORT:-8000}"
TOPOLOGY_INSTANCES=2
# Internal balancer ports (what a Kubernetes Service or compose's DNS gives the gateways).
TOPOLOGY_AUTH_INTERNAL=8391
TOPOLOGY_TURN_INTERNAL=8395

# The HTTP port of instance N (1, 2) of a service: its scripts/up port plus 100 x N.
topology_port() { echo $(($(service_port "$1") + 100 * $2)); }

# The edge: deploy/nginx/nginx.conf with each upstream name (compose's DNS names) turned
# into a group of the instances on loopback, and its files under .data.
topology_render_edge() {
    local conf="$TOPOLOGY/edge.conf" n
    mkdir -p "$TOPOLOGY/nginx"
    python3 - "$ROOT/deploy/nginx/nginx.conf" "$conf" "$TOPOLOGY/nginx" "$TOPOLOGY_EDGE_PORT" \
        "$(for n in $(seq 1 $TOPOLOGY_INSTANCES); do printf '%s ' "$(topology_port gateway "$n")"; done)" \
        "$(for n in $(seq 1 $TOPOLOGY_INSTANCES); do printf '%s ' "$(topology_port auth "$n")"; done)" \
        "$(for n in $(seq 1 $TOPOLOGY_INSTANCES); do printf '%s ' "$(topology_port turn-cred "$n")"; done)" \
        "$(for n in $(seq 1 $TOPOLOGY_INSTANCES); do printf '%s ' "$(topology_port attachment-signer "$n")"; done)" <<'PY'
import re, sys
source, target, tmp, port = sys.argv[1:5]
groups = {"gateway": sys.argv[5].split(), "auth": sys.argv[6].split(), "turn-cred": sys.argv[7].split(), "attachment-signer": sys.argv[8].split()}
text = open(source).read()
text = text.replace("pid /tmp/nginx.pid;", f"pid {tmp}/nginx.pid;")
text = re.sub(r"/tmp/nginx-(\w+)", lambda m: f"{tmp}/{m.group(1)}", text)
text = re.sub(r"\n\s*resolver [^\n]*\n\s*resolver_timeout [^\n]*", "", text)
text = text.replace("        listen 8080;", f"        listen 127.0.0.1:{port};")
upstreams = ""
for name, ports in groups.items():
    upstreams += f"    upstream {name.replace('-', '_')}_instances {{\n" + "".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;\n" for p in ports) + "    }\n"
    text = re.sub(r"set \$upstream " + re.escape(name) + r":\d+;", f"set $upstream {name.replace('-', '_')}_instances;", text)
assert "set $upstream" not in re.sub(r"set \$upstream \w+_instances;", "", text), "an upstream was not rendered"
text = text.replace("\n    server {", "\n" + upstreams + "\n    server {", 1)
open(target, "w").write(text)
PY
}

# The gateways' internal balancer for auth's and turn-cred's internal ports.
topology_render_internal() {
    local n
    {
        echo "worker_processes 1; pid $TOPOLOGY/nginx/internal.pid; error_log stderr warn;"
        echo "events { worker_connections 4096; }"
        echo "http { access_log off; client_body_temp_path $TOPOLOGY/nginx/ibody; proxy_temp_path $TOPOLOGY/nginx/iproxy;"
        echo "  fastcgi_temp_path $TOPOLOGY/nginx/ifcgi; uwsgi_temp_path $TOPOLOGY/nginx/iuwsgi; scgi_temp_path $TOPOLOGY/nginx/iscgi;"
        echo "  proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_next_upstream error timeout http_502 http_503 non_idempotent;"
        echo "  upstream auth_internal { keepalive 16;"
        for n in $(seq 1 $TOPOLOGY_INSTANCES); do echo "    server 127.0.0.1:$((8091 + 100 * n)) max_fails=1 fail_timeout=2s;"; done
        echo "  }"
        echo "  upstream turn_internal { keepalive 16;"
        for n in $(seq 1 $TOPOLOGY_INSTANCES); do echo "    server 127.0.0.1:$((8095 + 100 * n)) max_fails=1 fail_timeout=2s;"; done
        echo "  }"
        echo "  server { listen 127.0.0.1:$TOPOLOGY_AUTH_INTERNAL; location / { proxy_pass http://auth_internal; } }"
        echo "  server { listen 127.0.0.1:$TOPOLOGY_TURN_INTERNAL; location / { proxy_pass http://turn_internal; } }"
        echo "}"
    } >"$TOPOLOGY/internal.conf"
}

topology_nginx() { # start|stop|reload conf-name
    local conf="$TOPOLOGY/$2.conf" pidfile="$TOPOLOGY/nginx/$2.pid"
    [ "$2" = edge ] && pidfile="$TOPOLOGY/nginx/nginx.pid"
    case "$1" in
        start)
            [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && return 0
            /usr/sbin/nginx -c "$conf" -p "$TOPOLOGY/nginx" 2>>"$TOPOLOGY/logs/nginx-$2.log" || die "nginx ($2) did not start (see $TOPOLOGY/logs/nginx-$2.log)" ;;
        stop)
            [ -f "$pidfile" ] && kill -QUIT "$(cat "$pidfile")" 2>/dev/null || true ;;
    esac
}

# Starts instance N of a service (unless it runs), recording its pid and, when it ends,
# its exit status (<name>.exit), so a restart can be checked: SIGTERM, drain, exit 0.
topology_start_instance() { # service n
    local service="$1" n="$2" name="$1-$2" prefix port
    local pidfile="$TOPOLOGY/pids/$name.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return 0; fi
    prefix="$(service_prefix "$service")"
    port="$(topology_port "$service" "$n")"
    rm -f "$TOPOLOGY/pids/$name.exit"
    local extra=()
    case "$service" in
        auth) extra=("AUTH_INTERNAL_HTTP_PORT=$((8091 + 100 * n))") ;;
        turn-cred) extra=("TURN_CRED_INTERNAL_HTTP_PORT=$((8095 + 100 * n))") ;;
        # As deployed (compose.yaml, k8s): a drain of up to 45 s inside a 50 s grace.
        gateway) extra=("GATEWAY_DRAIN_TIMEOUT_SECONDS=${GATEWAY_DRAIN_TIMEOUT_SECONDS:-20}" "WHISPER_SHUTDOWN_GRACE_SECONDS=${WHISPER_SHUTDOWN_GRACE_SECONDS:-50}") ;;
    esac
    # The settings scripts/up gave the first start (topology_save_environment), so an
    # instance started again later runs as it did.
    [ -f "$TOPOLOGY/environment" ] && { set -a; source "$TOPOLOGY/environment"; set +a; }
    env "${prefix}_HTTP_PORT=$port" "${prefix}_HTTP_HOST=127.0.0.1" WHISPER_INSTANCE_ID="$name" "${extra[@]}" \
        setsid bash -c '"$1" >>"$2" 2>&1 </dev/null & echo $! >"$3"; wait $!; echo $? >"$4"' _ \
        "$BIN/$service" "$TOPOLOGY/logs/$name.log" "$pidfile" "$TOPOLOGY/pids/$name.exit" </dev/null >/dev/null 2>&1 &
    local i
    for i in $(seq 1 50); do [ -s "$pidfile" ] && break; sleep 0.05; done
}

# Keeps the services' settings of this start (they hold the tokens: readable by the
# owner only) for instances started again later.
topology_save_environment() {
    (umask 077; export -p | grep -E '^declare -x (WHISPER_|GATEWAY_|AUTH_|ROUTER_|PUSH_|ATTACHMENT_|TURN_|ADMIN_|GC_|NIO_|OTEL_)' \
        | sed 's/^declare -x //' >"$TOPOLOGY/environment")
}

topology_wait_ready() { # service n
    local port i
    port="$(topology_port "$1" "$2")"
    for i in $(seq 1 300); do
        curl -fsS "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

# SIGTERM (or another signal) to instance N; waits for it to end (at most `limit`
# seconds) and prints its exit status and how long it took, in ms.
topology_stop_instance() { # service n signal limit
    local name="$1-$2" pidfile="$TOPOLOGY/pids/$1-$2.pid" started i
    [ -f "$pidfile" ] || { echo "none 0"; return 0; }
    started="$(date +%s%3N)"
    kill "-$3" "$(cat "$pidfile")" 2>/dev/null || true
    for i in $(seq 1 $(($4 * 10))); do
        [ -f "$TOPOLOGY/pids/$name.exit" ] && break
        sleep 0.1
    done
    if [ -f "$TOPOLOGY/pids/$name.exit" ]; then
        echo "$(cat "$TOPOLOGY/pids/$name.exit") $(($(date +%s%3N) - started))"
    else
        kill -KILL "$(cat "$pidfile")" 2>/dev/null || true
        echo "timeout $(($(date +%s%3N) - started))"
    fi
    rm -f "$pidfile"
}

# The third-party auditor: whisper-audit --serve through the edge, signing each head it
# verified with $DATA/auditor-key (its public key is AUTH_KT_AUDITOR_KEYS).
topology_start_auditor() {
    "$BIN/whisper-audit" --server "http://127.0.0.1:$TOPOLOGY_EDGE_PORT" --serve --auditor-key "$DATA/auditor-key" --interval 2 \
        >>"$TOPOLOGY/logs/auditor.log" 2>&1 &
    echo $! >"$TOPOLOGY/pids/auditor.pid"
}

topology_stop_all() {
    local service n
    if [ -f "$TOPOLOGY/pids/auditor.pid" ]; then
        kill -TERM "$(cat "$TOPOLOGY/pids/auditor.pid")" 2>/dev/null || true
        rm -f "$TOPOLOGY/pids/auditor.pid"
    fi
    for service in "${SERVICES[@]}"; do
        for n in $(seq 1 $TOPOLOGY_INSTANCES); do
            [ -f "$TOPOLOGY/pids/$service-$n.pid" ] && kill -TERM "$(cat "$TOPOLOGY/pids/$service-$n.pid")" 2>/dev/null
        done
    done
    for service in "${SERVICES[@]}"; do
        for n in $(seq 1 $TOPOLOGY_INSTANCES); do
            local pidfile="$TOPOLOGY/pids/$service-$n.pid" i
            [ -f "$pidfile" ] || continue
            for i in $(seq 1 700); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$(cat "$pidfile")" 2>/dev/null || true
            rm -f "$pidfile"
        done
    done
    topology_nginx stop edge
    topology_nginx stop internal
}
