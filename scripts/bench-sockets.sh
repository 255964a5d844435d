# scripts/bench --sockets N [--gateways G] [whisper-load options for the message run]:
# sourced by scripts/bench once its stack is up (pids: auth, the G gateways, the router).
#
# One load process per gateway opens its share of N registered sockets on the SDK's
# session object (each a new identity, bound, holding presence and pinging at the
# SDK's default interval, as an idle app does) and holds them. With all of them open:
# the gateways' memory per socket, CPU per idle socket over a window with no messages,
# Redis's commands, CPU and memory for them (the presence keepers), and then the usual
# message run among 50 more pairs while the idle sockets stay open.
#
# WHISPER_BENCH_IDLE_WINDOW (seconds, default 60) is the idle window's length.

# VmRSS of a process, in KiB (0 when it is gone).
rss_kib() { local kib; kib="$(ps -o rss= -p "$1" 2>/dev/null | tr -d ' ')"; echo "${kib:-0}"; }

# Redis's used_memory, in bytes.
redis_used_memory() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" info memory | tr -d '\r' | sed -n 's/^used_memory://p'; }

hold_sockets() {
    local window="${WHISPER_BENCH_IDLE_WINDOW:-60}"
    local gateway_pids=("${pids[@]:1:$GATEWAYS}")
    local per index url rss_before=0 rss_after=0 pid
    for pid in "${gateway_pids[@]}"; do rss_before=$((rss_before + $(rss_kib "$pid"))); done
    local redis_memory_before
    redis_memory_before="$(redis_used_memory)"

    per=$(( (SOCKETS + GATEWAYS - 1) / GATEWAYS ))
    log "opening $SOCKETS idle sockets: $per on each of $GATEWAYS gateways, one load process each"
    SOCKET_LOADERS=()
    stop_loaders() {
        [ "${#SOCKET_LOADERS[@]}" -eq 0 ] || kill -TERM "${SOCKET_LOADERS[@]}" 2>/dev/null || true
        [ "${#SOCKET_LOADERS[@]}" -eq 0 ] || wait "${SOCKET_LOADERS[@]}" 2>/dev/null || true
        SOCKET_LOADERS=()
    }
    trap 'stop_loaders; cleanup' EXIT
    for index in $(seq 1 "$GATEWAYS"); do
        url="ws://127.0.0.1:$((18070 + index * 10))/ws"
        "$BIN/whisper-load" --gateway "$url" --idle-sockets "$per" "${LEAN[@]}" --concurrency 32 --hold 86400 \
            >"$DATA/bench-logs/sockets-$index.log" 2>&1 &
        SOCKET_LOADERS+=($!)
    done
    local started=$SECONDS
    for index in $(seq 1 "$GATEWAYS"); do
        until grep -q '^holding ' "$DATA/bench-logs/sockets-$index.log"; do
            kill -0 "${SOCKET_LOADERS[$((index - 1))]}" 2>/dev/null \
                || die "load process $index stopped before its sockets were open: $(tail -3 "$DATA/bench-logs/sockets-$index.log")"
            [ $((SECONDS - started)) -lt 3600 ] || die "the sockets were not all open within an hour"
            sleep 2
        done
    done
    echo "$SOCKETS sockets open after $((SECONDS - started)) s"
    # Let the registrations' work drain (buffers handed back, the directory's queue).
    sleep 15

    local before="$DATA/bench-logs/cpu-idle-before" after="$DATA/bench-logs/cpu-idle-after"
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" config resetstat >/dev/null
    cpu_snapshot >"$before"
    sleep "$window"
    cpu_snapshot >"$after"
    for pid in "${gateway_pids[@]}"; do rss_after=$((rss_after + $(rss_kib "$pid"))); done
    local redis_memory_after loaders_rss=0
    redis_memory_after="$(redis_used_memory)"
    for pid in "${SOCKET_LOADERS[@]}"; do loaders_rss=$((loaders_rss + $(rss_kib "$pid"))); done

    echo "idle: $SOCKETS sockets over $GATEWAYS gateways, a ${window} s window with no messages"
    awk -v n="$SOCKETS" -v kb="$rss_before" -v ka="$rss_after" 'BEGIN {
        printf "  gateways resident memory: %.0f MB before, %.0f MB with the sockets: %.2f KiB per socket\n", kb / 1024, ka / 1024, (ka - kb) / n }'
    awk -v n="$SOCKETS" -v b="$redis_memory_before" -v a="$redis_memory_after" 'BEGIN {
        printf "  Redis used_memory: %.0f MB before, %.0f MB with the sockets: %.0f bytes per socket\n", b / 1048576, a / 1048576, (a - b) / n }'
    awk -v n="$SOCKETS" -v k="$loaders_rss" 'BEGIN {
        printf "  load processes (the apps) resident memory: %.0f MB, %.1f KiB per socket\n", k / 1024, k / n }'
    # CPU by process name over the window: share of a core, and per socket and second.
    cpu_used "$before" "$after" | awk -v n="$SOCKETS" -v w="$window" '
        { printf "  %-14s %6.1f %% of a core, %6.2f us CPU per socket per second\n", $1, $2 / w / 10, $2 * 1000 / w / n }' | sort -k2 -n -r
    echo "Redis commands per socket per minute (the keepers and presence):"
    redis_report "$(awk -v n="$SOCKETS" -v w="$window" 'BEGIN { print n * w / 60 }')" | sed "s/per message/per socket per minute/"

    log "messages among 50 more pairs while the sockets are held"
    if [ "$#" -gt 0 ]; then load "$@"; else load --pairs 50 --rate 1000 --duration 20; fi
    for index in $(seq 1 "$GATEWAYS"); do
        kill -0 "${SOCKET_LOADERS[$((index - 1))]}" 2>/dev/null || echo "warning: load process $index had stopped: $(tail -2 "$DATA/bench-logs/sockets-$index.log")"
    done
    local open
    open="$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" --scan --pattern 'presence:*' | wc -l)"
    echo "presence keys at the end: $open"
    stop_loaders
}
