# Shared helpers for scripts/up, scripts/down and scripts/test. Source, do not run.
# Everything lives under .data/ in the project (ignored by git) and listens on loopback only.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="$ROOT/.data"

log() { printf '[whisper] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The services refuse a Redis less durable than WHISPER_REDIS_REQUIRED_PERSISTENCE
# (always by default; docs/operations.md, "Redis settings checked at start"): ask of
# them what the Redis these scripts start keeps, unless told: here, for a script's own
# settings, and again as start_redis and start_redis_cluster start Redis, for a script
# that set WHISPER_REDIS_APPENDFSYNC from its options after sourcing this file.
persistence_told="${WHISPER_REDIS_REQUIRED_PERSISTENCE:+yes}"
require_started_redis_persistence() {
    [ "$persistence_told" = yes ] && return 0
    case "${WHISPER_REDIS_APPENDONLY:-yes}:${WHISPER_REDIS_APPENDFSYNC:-always}" in
        no:* | *:no) export WHISPER_REDIS_REQUIRED_PERSISTENCE=none ;;
        *:everysec) export WHISPER_REDIS_REQUIRED_PERSISTENCE=everysec ;;
        *) export WHISPER_REDIS_REQUIRED_PERSISTENCE=always ;;
    esac
}
require_started_redis_persistence

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Installs the Debian packages the build and the stack need, only when something is missing.
ensure_packages() {
    local missing=()
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    pkg-config --exists hiredis 2>/dev/null || missing+=(libhiredis-dev)
    pkg-config --exists libsodium 2>/dev/null || missing+=(libsodium-dev)
    pkg-config --exists jemalloc 2>/dev/null || missing+=(libjemalloc-dev)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    [ -n "$(pg_bindir 2>/dev/null)" ] || missing+=(postgresql)
    command -v turnserver >/dev/null 2>&1 || missing+=(coturn)
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1 || missing+=(pgbouncer)
    if [ "${WHISPER_NEED_PROMTOOL:-0}" = 1 ]; then
        command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
    fi
    # The operator console's browser test: Debian's Chromium, driven by Playwright.
    if [ "${WHISPER_NEED_BROWSER:-0}" = 1 ]; then
        command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    fi
    # scripts/check-deploy's checkers. Only what is missing: a kubectl installed from
    # elsewhere must not be replaced (Debian's package would conflict with it).
    if [ "${WHISPER_NEED_DEPLOY_TOOLS:-0}" = 1 ]; then
        command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
        [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
        command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
    fi
    # scripts/compose-test: podman (with runc, netavark and aardvark's DNS) under
    # docker-compose, and debootstrap for the images' base.
    if [ "${WHISPER_NEED_CONTAINERS:-0}" = 1 ]; then
        for tool in podman runc netavark debootstrap docker-compose; do
            command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/lib/podman/$tool" ] || [ -x "/usr/sbin/$tool" ] || missing+=("$tool")
        done
        [ -x /usr/lib/podman/aardvark-dns ] || missing+=(aardvark-dns)
    fi
    if [ "${#missing[@]}" -gt 0 ]; then
        log "installing: ${missing[*]}"
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
        # The nginx package starts a server; check-deploy only needs the binary.
        case " ${missing[*]} " in *" nginx-light "*) pkill -x nginx 2>/dev/null || true ;; esac
    fi
    if [ "${WHISPER_NEED_BROWSER:-0}" = 1 ] && ! python3 -c 'import playwright.sync_api' >/dev/null 2>&1; then
        log "installing: playwright (pip; it drives Debian's chromium, no browser download)"
        python3 -m pip install -q playwright >/dev/null || die "pip install playwright failed"
    fi
    # The push-to-talk media test's WebRTC stack (aiortc, with numpy for the spectra).
    if [ "${WHISPER_NEED_MEDIA:-0}" = 1 ] && ! python3 -c 'import aiortc, numpy' >/dev/null 2>&1; then
        log "installing: aiortc numpy (pip)"
        python3 -m pip install -q aiortc numpy >/dev/null || die "pip install aiortc numpy failed"
    fi
    # The local S3-compatible store (moto's server mode, from PyPI).
    if ! python3 -c 'import moto.server, flask' >/dev/null 2>&1; then
        log "installing: moto[server] (pip)"
        python3 -m pip install -q 'moto[server]' >/dev/null || die "pip install moto[server] failed"
    fi
}

# Where Debian keeps the PostgreSQL server binaries (not on PATH).
pg_bindir() {
    local dir
    for dir in /usr/lib/postgresql/*/bin; do
        [ -x "$dir/initdb" ] && { echo "$dir"; return 0; }
    done
    if command -v pg_config >/dev/null 2>&1; then
        dir="$(pg_config --bindir)"
        [ -x "$dir/initdb" ] && { echo "$dir"; return 0; }
    fi
    return 1
}

# PostgreSQL refuses to run as root: run its tools as the postgres user when we are root.
as_pg() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# start_postgres NAME PORT: a cluster in .data/NAME with role and database "whisper".
start_postgres() {
    local name="$1" port="$2" bindir dir run
    bindir="$(pg_bindir)" || die "PostgreSQL server binaries not found"
    dir="$DATA/$name"
    run="$DATA/$name-run"
    mkdir -p "$DATA"
    chmod 755 "$DATA"
    if [ ! -f "$dir/PG_VERSION" ]; then
        log "creating PostgreSQL cluster in $dir"
        mkdir -p "$dir"
        [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir"
        chmod 700 "$dir"
        as_pg "$bindir/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 >/dev/null
    fi
    mkdir -p "$run"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$run"
    # WHISPER_PG_OPTIONS: more server settings ("-c name=value ...").
    # WHISPER_PG_TLS_DIR: a folder with server.crt and server.key: TLS on as well (plain
    # connections still work).
    local tls=""
    if [ -n "${WHISPER_PG_TLS_DIR:-}" ]; then
        tls="-c ssl=on -c ssl_cert_file=$WHISPER_PG_TLS_DIR/server.crt -c ssl_key_file=$WHISPER_PG_TLS_DIR/server.key"
    fi
    if ! as_pg "$bindir/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
        as_pg "$bindir/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
            -o "-p $port -k $run -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=${WHISPER_PG_FSYNC:-on} $tls ${WHISPER_PG_OPTIONS:-}" \
            start >/dev/null || { tail -20 "$dir/server.log" >&2; die "PostgreSQL did not start"; }
    fi
    local psql=(as_pg psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -qtA -v ON_ERROR_STOP=1)
    if [ "$("${psql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname = 'whisper'")" != 1 ]; then
        "${psql[@]}" -c "CREATE ROLE whisper LOGIN CREATEDB" >/dev/null
    fi
    if [ "$("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = 'whisper'")" != 1 ]; then
        "${psql[@]}" -c "CREATE DATABASE whisper OWNER whisper" >/dev/null
    fi
}

# make_test_tls DIR: a CA made now (DIR/ca.crt) and a server certificate it signed for
# localhost and 127.0.0.1 (DIR/server.crt, DIR/server.key, readable by the PostgreSQL
# server), for the TLS tests. Nothing in it outlives the run that made it.
make_test_tls() {
    local dir="$1"
    rm -rf "$dir"
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj "/CN=Whisper test CA" -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
        -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$dir/server.ext"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
        -extfile "$dir/server.ext" -out "$dir/server.crt" 2>/dev/null
    chmod 600 "$dir/server.key"
    chmod 755 "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir/server.key" "$dir/server.crt"
    return 0
}

# start_pgbouncer NAME PORT PG_PORT: Debian's PgBouncer in transaction mode in front of
# the PostgreSQL on PG_PORT, every database, user "whisper" without a password (as the
# test cluster trusts it), in .data/NAME.
start_pgbouncer() {
    local name="$1" port="$2" pg_port="$3" dir bin
    dir="$DATA/$name"
    bin="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
    mkdir -p "$dir"
    printf '"whisper" ""\n' >"$dir/users.txt"
    cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=$pg_port
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
    [ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$dir"
    as_pg "$bin" -d -q "$dir/pgbouncer.ini" || die "PgBouncer did not start"
    local i
    for i in $(seq 1 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.1
    done
    die "PgBouncer did not listen on $port"
}

stop_pgbouncer() {
    local name="$1"
    [ -f "$DATA/$name/pgbouncer.pid" ] && kill "$(cat "$DATA/$name/pgbouncer.pid")" 2>/dev/null || true
    return 0
}

stop_postgres() {
    local name="$1" bindir
    bindir="$(pg_bindir)" || return 0
    [ -f "$DATA/$name/PG_VERSION" ] || return 0
    as_pg "$bindir/pg_ctl" -D "$DATA/$name" -m fast -w stop >/dev/null 2>&1 || true
}

# start_redis NAME PORT: append-only Redis in .data/NAME. WHISPER_REDIS_APPENDFSYNC
# (always by default: a message is on disk before its message_accepted goes out; see
# docs/operations.md) and WHISPER_REDIS_APPENDONLY (yes) choose its durability;
# WHISPER_REDIS_AOF_REWRITE_MIN_SIZE (512mb) how far the file grows between rewrites.
start_redis() {
    local name="$1" port="$2" dir
    require_started_redis_persistence
    dir="$DATA/$name"
    mkdir -p "$dir"
    if redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then
        return 0
    fi
    # A port in the ephemeral range can be held for a moment by an outgoing connection
    # (bind: address already in use): try again a few times before giving up.
    local attempt i
    for attempt in 1 2 3 4 5; do
        redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --daemonize yes \
            --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
            --appendonly "${WHISPER_REDIS_APPENDONLY:-yes}" --appendfsync "${WHISPER_REDIS_APPENDFSYNC:-always}" --save "" \
            --auto-aof-rewrite-min-size "${WHISPER_REDIS_AOF_REWRITE_MIN_SIZE:-512mb}" >/dev/null
        for i in $(seq 1 50); do
            redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && return 0
            sleep 0.1
        done
        log "Redis did not start on port $port (attempt $attempt); trying again"
    done
    die "Redis did not start on port $port (see $dir/redis.log)"
}

stop_redis() {
    local port="$2"
    redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
}

# start_redis_cluster NAME FIRST_PORT: a Redis Cluster on loopback in .data/NAME, six
# cluster-enabled redis-servers on FIRST_PORT..FIRST_PORT+5 (their cluster buses 10000
# above), made three masters with a replica each by redis-cli --cluster create, as
# durable as the services require. A cluster made before (its nodes.conf files) is
# started again as it was. Sets REDIS_CLUSTER_SEEDS (host:port,...) for
# WHISPER_REDIS_CLUSTER. Returns once every node reports cluster_state:ok and every
# master's replica is in sync.
start_redis_cluster() {
    local name="$1" first="$2" port dir i created=no
    local ports=()
    require_started_redis_persistence
    for port in $(seq "$first" $((first + 5))); do ports+=("$port"); done
    for port in "${ports[@]}"; do
        dir="$DATA/$name/$port"
        mkdir -p "$dir"
        [ -f "$dir/nodes.conf" ] && created=yes
        redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && continue
        redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --daemonize yes \
            --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
            --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout "${WHISPER_REDIS_CLUSTER_NODE_TIMEOUT_MS:-2000}" \
            --appendonly yes --appendfsync "${WHISPER_REDIS_APPENDFSYNC:-always}" --save "" --maxmemory-policy noeviction \
            --auto-aof-rewrite-min-size "${WHISPER_REDIS_AOF_REWRITE_MIN_SIZE:-512mb}" >/dev/null
        for i in $(seq 1 50); do
            redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && break
            sleep 0.1
        done
        redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 || die "cluster node did not start on port $port (see $dir/redis.log)"
    done
    if [ "$created" = no ]; then
        redis-cli --cluster create $(printf '127.0.0.1:%s ' "${ports[@]}") --cluster-replicas 1 --cluster-yes >"$DATA/$name/create.log" 2>&1 \
            || die "redis-cli --cluster create failed (see $DATA/$name/create.log)"
    fi
    REDIS_CLUSTER_SEEDS="$(printf '127.0.0.1:%s,' "${ports[@]}")"
    REDIS_CLUSTER_SEEDS="${REDIS_CLUSTER_SEEDS%,}"
    wait_redis_cluster "$first"
}

# wait_redis_cluster FIRST_PORT: until the cluster's live nodes all say cluster_state:ok
# and every master has a replica in sync (at most 60 s).
wait_redis_cluster() {
    local first="$1" port i ok
    for i in $(seq 1 600); do
        ok=yes
        for port in $(seq "$first" $((first + 5))); do
            redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 || continue
            redis-cli -h 127.0.0.1 -p "$port" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || { ok=no; break; }
            if redis-cli -h 127.0.0.1 -p "$port" role 2>/dev/null | head -1 | grep -q master; then
                redis-cli -h 127.0.0.1 -p "$port" info replication 2>/dev/null | grep -q 'state=online' || { ok=no; break; }
            fi
        done
        [ "$ok" = yes ] && return 0
        sleep 0.1
    done
    die "the Redis Cluster on ports $first.. did not settle (see $DATA/*/$first/redis.log)"
}

# redis_cluster_masters FIRST_PORT: the ports of the nodes that are masters now.
redis_cluster_masters() {
    local first="$1" port
    for port in $(seq "$first" $((first + 5))); do
        redis-cli -h 127.0.0.1 -p "$port" role 2>/dev/null | head -1 | grep -q master && echo "$port"
    done
    return 0
}

# stop_redis_cluster NAME FIRST_PORT
stop_redis_cluster() {
    local first="$2" port
    for port in $(seq "$first" $((first + 5))); do
        redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
    done
}

# export_fault_load_settings: the services' settings under whisper-faults' load
# (scripts/faults, scripts/topology-test). Its identities all register and send from
# 127.0.0.1, many messages between few of them: the per-address and per-identity limits
# are lifted. A dead router's entries are claimed after 2 s (default 10 s), as an
# operator who wants fast failover would set it; one event-loop thread per process, as
# many busy processes share this machine's cores.
export_fault_load_settings() {
    export NIO_SINGLETON_GROUP_LOOP_COUNT=1
    export AUTH_RATE_LIMIT_REGISTER_PER_IP=100000/60s
    export GATEWAY_RATE_LIMIT_SEND_PER_SENDER=1000000/60s
    export GATEWAY_RATE_LIMIT_CONTROL_PER_ADDRESS=1000000/60s
    export GATEWAY_RATE_LIMIT_REFUSALS_PER_ADDRESS=1000000/60s
    export WHISPER_RATE_LIMIT_SEND_PER_PAIR=1000000/60s
    export GATEWAY_RATE_LIMIT_FETCH_PER_IDENTITY=1000000/60s
    export GATEWAY_RATE_LIMIT_RECEIPTS_PER_IDENTITY=1000000/60s
    export GATEWAY_RATE_LIMIT_ROUTED_PER_ADDRESS=1000000/60s
    export GATEWAY_MAX_SOCKETS_PER_ADDRESS=100000
    export ROUTER_CLAIM_AFTER_MS=2000
}

# start_coturn NAME PORT SECRET: coturn on loopback in .data/NAME, in the REST-API mode
# turn-cred serves (use-auth-secret), relaying on 127.0.0.1 only.
start_coturn() {
    local name="$1" port="$2" secret="$3" dir
    dir="$DATA/$name"
    mkdir -p "$dir"
    if [ -f "$dir/turn.pid" ] && kill -0 "$(cat "$dir/turn.pid")" 2>/dev/null; then
        return 0
    fi
    # deploy/coturn/turnserver.conf denies relays to private and loopback ranges; on
    # loopback the clients' peers are 127.0.0.1, so that one address is let through.
    turnserver -o -c "$ROOT/deploy/coturn/turnserver.conf" --listening-ip=127.0.0.1 --relay-ip=127.0.0.1 --listening-port="$port" \
        --min-port="${WHISPER_TURN_MIN_PORT:-49160}" --max-port="${WHISPER_TURN_MAX_PORT:-49260}" \
        --static-auth-secret="$secret" --realm=whisper.local \
        --allow-loopback-peers --allowed-peer-ip=127.0.0.1 \
        --log-file="$dir/turn.log" --simple-log --pidfile="$dir/turn.pid" >/dev/null 2>&1 \
        || die "coturn did not start (see $dir/turn.log)"
    local i
    for i in $(seq 1 50); do
        [ -s "$dir/turn.pid" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.1
    done
    die "coturn did not start on port $port (see $dir/turn.log)"
}

stop_coturn() {
    local dir="$DATA/$1"
    [ -f "$dir/turn.pid" ] || return 0
    kill -TERM "$(cat "$dir/turn.pid")" 2>/dev/null || true
    rm -f "$dir/turn.pid"
}

# start_s3 NAME PORT BUCKET: moto's S3-compatible server on loopback with the bucket.
# It keeps objects in memory: they go when it stops (use MinIO or S3 to keep them).
start_s3() {
    local name="$1" port="$2" bucket="$3" dir i
    dir="$DATA/$name"
    mkdir -p "$dir"
    if ! { [ -f "$dir/moto.pid" ] && kill -0 "$(cat "$dir/moto.pid")" 2>/dev/null; }; then
        setsid python3 -m moto.server -H 127.0.0.1 -p "$port" >>"$dir/moto.log" 2>&1 </dev/null &
        echo $! >"$dir/moto.pid"
    fi
    for i in $(seq 1 100); do
        curl -fsS -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null && break
        sleep 0.1
    done
    curl -fsS -o /dev/null -X PUT "http://127.0.0.1:$port/$bucket" || die "the S3 store did not start on port $port (see $dir/moto.log)"
}

stop_s3() {
    local dir="$DATA/$1"
    [ -f "$dir/moto.pid" ] || return 0
    kill -TERM "$(cat "$dir/moto.pid")" 2>/dev/null || true
    rm -f "$dir/moto.pid"
}

SERVICES=(gateway auth router push-sender attachment-signer turn-cred admin gc-worker)

# The HTTP port of each service when run by scripts/up.
service_port() {
    case "$1" in
        gateway) echo 8080 ;; auth) echo 8081 ;; router) echo 8082 ;; push-sender) echo 8083 ;;
        attachment-signer) echo 8084 ;; turn-cred) echo 8085 ;; admin) echo 8086 ;; gc-worker) echo 8087 ;;
    esac
}

# The environment variable prefix of a service (push-sender -> PUSH_SENDER).
service_prefix() {
    echo "$1" | tr 'a-z-' 'A-Z_'
}
