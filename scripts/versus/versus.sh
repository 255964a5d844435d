# scripts/bench --versus ejabberd: the message job against Whisper and against Debian's
# ejabberd, interleaved rate by rate, driven by the same generator (whisper-load, whose
# --xmpp mode speaks XMPP over WebSocket). Sourced by scripts/bench once the Whisper
# stack is up; uses its BIN, DATA, pids, gateway_urls and ports.
#
# Options (the rest go to whisper-load for both servers):
#   --rates "1000 2000 3000 8000"   offered messages/s, over all pairs
#   --pairs 50 --duration 15 --window 1000
# For each rate it reports, for both servers: delivered/s, latency p50/p99/max, server CPU
# per delivered message (every process of each stack: the services, Redis and PostgreSQL
# for Whisper; the Erlang VM and its helpers for ejabberd) over the measured window,
# the machine's busy share, and the stack's memory (PSS); then the ratios, and each
# server's capacity: the highest rate it carried with p99 at or under 50 ms.

EJABBERD_RUN="$DATA/ejabberd"
EJABBERD_WS="ws://127.0.0.1:5280/ws"

EJABBERDCTL=(/usr/sbin/ejabberdctl --config "$EJABBERD_RUN/ejabberd.yml" --ctl-config "$EJABBERD_RUN/ejabberdctl.cfg"
    --spool "$EJABBERD_RUN/spool" --logs "$EJABBERD_RUN/log")
ejabberd_ctl() { timeout 90 "${EJABBERDCTL[@]}" "$@"; }

# A node of its own in .data/ejabberd, made anew each run, with users u1 ... uN.
ejabberd_start() { # users
    local users="$1"
    ejabberd_ctl stop >/dev/null 2>&1 || true
    ejabberd_ctl stopped >/dev/null 2>&1 || true
    rm -rf "$EJABBERD_RUN"
    mkdir -p "$EJABBERD_RUN/spool" "$EJABBERD_RUN/log"
    cp "$ROOT/scripts/versus/ejabberd.yml" "$EJABBERD_RUN/ejabberd.yml"
    sed "s#__RUN__#$EJABBERD_RUN#" "$ROOT/scripts/versus/ejabberdctl.cfg" >"$EJABBERD_RUN/ejabberdctl.cfg"
    chown -R ejabberd:ejabberd "$EJABBERD_RUN"
    # ejabberdctl drops to the ejabberd user, who must reach the folder.
    chmod o+x "$ROOT" "$DATA" 2>/dev/null || true
    log "starting ejabberd ($(dpkg-query -W -f '${Version}' ejabberd 2>/dev/null))"
    ejabberd_ctl start || die "ejabberd did not start (see $EJABBERD_RUN/log)"
    ejabberd_ctl started >/dev/null || die "ejabberd did not come up (see $EJABBERD_RUN/log)"
    log "registering $users ejabberd users"
    seq 1 "$users" | xargs -P 4 -I{} timeout 60 "${EJABBERDCTL[@]}" register "u{}" localhost benchpw >/dev/null \
        || die "registering ejabberd's users failed"
}

# The ejabberd node's processes: the Erlang VM run as the ejabberd user (its helpers
# are its children).
ejabberd_pids() { pgrep -u ejabberd -f "beam" || true; }

# Whisper's stack: the services the benchmark started, its Redis and its PostgreSQL
# (the postmaster; its backends are its children).
whisper_pids() {
    printf '%s\n' "${pids[@]}"
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" info server | tr -d '\r' | sed -n 's/^process_id://p'
    head -1 "$DATA/bench-postgres/postmaster.pid"
}

# One run of whisper-load against one server; prints its report.
versus_run() { # server rate pairs duration window extra...
    local server="$1" rate="$2" pairs="$3" duration="$4" window="$5" pid_args=() pid
    shift 5
    if [ "$server" = whisper ]; then
        for pid in $(whisper_pids); do pid_args+=(--server-pid "$pid"); done
        "$BIN/whisper-load" "${gateway_urls[@]}" "${pid_args[@]}" --pairs "$pairs" --rate "$rate" --duration "$duration" --window "$window" "$@"
    else
        for pid in $(ejabberd_pids); do pid_args+=(--server-pid "$pid"); done
        "$BIN/whisper-load" --xmpp "$EJABBERD_WS" "${pid_args[@]}" --pairs "$pairs" --rate "$rate" --duration "$duration" --window "$window" "$@"
    fi
}

# The figures of one report as "delivered p50 p99 max cpu_us busy mb errors".
versus_figures() {
    awk '
        /^received/ { for (i = 1; i <= NF; i++) { if ($i == "p50") p50 = $(i+1); if ($i == "p99") p99 = $(i+1); if ($i == "max") { max = $(i+1); sub(/;$/, "", max) }
                      if ($i == "s:") rate = $(i+1); if ($i == "errors") { e = $(i+1); sub(/[^0-9].*/, "", e) } } }
        /^server CPU/ { cpu = $3; for (i = 1; i <= NF; i++) { if ($i == "busy") busy = $(i+1); if ($i == "(PSS)") mb = $(i+1) } }
        END { printf "%s %s %s %s %s %s %s %s\n", rate, p50, p99, max, cpu, busy, mb, e }'
}

versus_ejabberd() {
    local rates="1000 2000 3000 8000" pairs=50 duration=15 window=1000 extra=()
    while [ "$#" -gt 0 ]; do
        case "$1" in
            --rates) rates="$2"; shift 2 ;;
            --pairs) pairs="$2"; shift 2 ;;
            --duration) duration="$2"; shift 2 ;;
            --window) window="$2"; shift 2 ;;
            *) extra+=("$1"); shift ;;
        esac
    done
    ejabberd_start $((pairs * 2))
    local results="$DATA/bench-logs/versus.txt" order=0 rate server out
    : >"$results"
    # A first, unmeasured round of each at the first rate: both servers (and the disk
    # behind them: ejabberd has just written its users) settle before anything counts.
    for server in ejabberd whisper; do
        log "$server: warming up, not measured"
        versus_run "$server" "${rates%% *}" "$pairs" 5 "$window" "${extra[@]}" >/dev/null || die "the $server warm-up failed"
    done
    for rate in $rates; do
        # Interleaved, and in turn each goes first, so that the host's drift within the
        # hour falls on both alike.
        local servers="whisper ejabberd"
        [ $((order % 2)) = 1 ] && servers="ejabberd whisper"
        order=$((order + 1))
        for server in $servers; do
            log "$server at $rate messages/s offered ($pairs pairs, $duration s)"
            out="$(versus_run "$server" "$rate" "$pairs" "$duration" "$window" "${extra[@]}")" || die "the $server run failed"
            echo "$out" | sed 's/^/    /' >&2
            echo "$rate $server $(versus_figures <<<"$out")" >>"$results"
        done
    done
    versus_table "$results"
}

# The table of both servers' figures per rate, and Whisper's as a ratio of ejabberd's.
versus_table() { # results
    awk '
        { key = $1 " " $2; rate[$1] = 1; d[key] = $3; p50[key] = $4; p99[key] = $5; mx[key] = $6; cpu[key] = $7; busy[key] = $8; mb[key] = $9; err[key] = $10 }
        function ratio(a, b) { return (b > 0) ? sprintf("%.2f", a / b) : "-" }
        END {
            printf "\n| offered/s | server | delivered/s | p50 ms | p99 ms | max ms | server CPU us/msg | machine busy %% | memory MB | errors |\n"
            printf "|---|---|---|---|---|---|---|---|---|---|\n"
            n = 0; for (r in rate) sorted[++n] = r + 0
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (sorted[j] < sorted[i]) { t = sorted[i]; sorted[i] = sorted[j]; sorted[j] = t }
            for (i = 1; i <= n; i++) for (s = 1; s <= 2; s++) {
                server = (s == 1) ? "ejabberd" : "whisper"; key = sorted[i] " " server
                if (key in d) printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", sorted[i], server, d[key], p50[key], p99[key], mx[key], cpu[key], busy[key], mb[key], err[key]
            }
            printf "\nWhisper as a ratio of ejabberd (under 1: Whisper spends less or answers sooner; delivered: over 1, Whisper carries more):\n\n"
            printf "| offered/s | CPU per message | p50 | p99 | delivered/s |\n|---|---|---|---|---|\n"
            for (i = 1; i <= n; i++) {
                w = sorted[i] " whisper"; e = sorted[i] " ejabberd"
                printf "| %d | %s | %s | %s | %s |\n", sorted[i], ratio(cpu[w], cpu[e]), ratio(p50[w], p50[e]), ratio(p99[w], p99[e]), ratio(d[w], d[e])
            }
            for (s = 1; s <= 2; s++) {
                server = (s == 1) ? "ejabberd" : "whisper"; best = 0
                for (i = 1; i <= n; i++) { key = sorted[i] " " server
                    if ((key in d) && p99[key] <= 50 && d[key] >= 0.98 * sorted[i]) best = sorted[i] }
                cap[server] = best
                printf "\n%s: capacity at p99 <= 50 ms (of the rates run, all delivered): %d/s", server, best
            }
            printf "\n"
        }' "$1"
}
