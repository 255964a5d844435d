import ArgumentParser
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization
import WhisperClient
import WhisperShared

/// Load generator: N pairs of identities, each sender sending to its recipient at a
/// fixed rate through the whole path (gateway, router stream, router, pending queue,
/// pub/sub, recipient's gateway), recipients decrypting, verifying and acknowledging.
/// Reports messages/second received and end-to-end latency percentiles.
@main
struct WhisperLoad: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "whisper-load", abstract: "End-to-end messaging load test.")

    @Option(name: .customLong("gateway"), help: "Gateway WebSocket URL; repeat to spread users over several gateways.")
    var gateways: [String] = ["ws://127.0.0.1:8080/ws"]

    @Option(help: "Sender/recipient pairs.")
    var pairs = 50

    @Option(help: "Messages per second over all pairs; 0 sends as fast as the server accepts.")
    var rate = 1_000.0

    @Option(help: "Seconds of measurement.")
    var duration = 20.0

    @Option(help: "Seconds of warm-up before measuring.")
    var warmup = 3.0

    @Option(help: "Messages a sender may have waiting for message_accepted.")
    var window = 8

    @Flag(help: "Leave each pair strangers. By default each pair first exchanges a message each way, as contacts have; strangers' messages are also counted against their share of the recipient's queue.")
    var strangers = false

    @Flag(help: "Make each message as it is sent (signed and sealed in the run), instead of making a paced run's messages before it starts. By default they are made ahead, so that the clients' signatures and encryption do not take the CPU the server under test shares with the generator.")
    var signAsSent = false

    @Flag(help: "Print latency percentiles for each second of the run.")
    var timeline = false

    @Option(help: "Write each measured message to this file: when it was sent (ms since the generator started) and its latency (ms).")
    var samples: String?

    @Flag(help: "Verify each received message's Ed25519 signature and decrypt it, as a client does. Without it, each message is checked field by field against what was sent (any change by the server counts as an error), which costs the machine under test no signature verification.")
    var verify = false

    @Option(help: "How sends are spaced: 'even' (each sender at a fixed interval, senders' phases spread over it, so the whole load is smooth) or 'poisson' (random, exponentially distributed gaps: independent clients).")
    var arrivals: Arrivals = .even

    @Option(help: "Instead of sending: open this many registered, idle sockets and hold them, to measure what an idle socket costs a gateway (with --rss-of).")
    var idleSockets = 0

    @Option(help: "With --idle-sockets: the gateway's process ID, whose resident memory is read before and after the sockets open.")
    var rssOf: Int32?

    @Flag(help: "With --idle-sockets: after registering through the SDK, hold each socket on a lean handler on the event loop (bound with fetch_pending, a ping frame every 20 s as the SDK sends, no task or actor per socket) instead of a WhisperSession: the apps' side of a benchmark of many sockets costs a few microseconds per socket and second instead of tens, so that the machine measures the gateways.")
    var lean = false

    @Option(help: "With --idle-sockets: registrations in flight at once.")
    var concurrency = 16

    @Option(help: "With --idle-sockets: once every socket is open, print a line saying so and keep them open (pinging as apps do) this many seconds, or until SIGTERM, before closing them; for a benchmark that measures the gateways from outside while they hold them (scripts/bench --sockets).")
    var hold = 0.0

    @Option(help: "Instead of Whisper: an XMPP server's WebSocket URL (RFC 7395), driven with the same job: users u1 ... u(2N) of --xmpp-domain, pairs u1 to u2, u3 to u4, ..., every message answered with an XEP-0184 receipt.")
    var xmpp: String?

    @Option(help: "With --xmpp: the users' domain.")
    var xmppDomain = "localhost"

    @Option(help: "With --xmpp: every user's password.")
    var xmppPassword = "benchpw"

    @Option(help: "A process of the server under test (repeat for each; their children count too): its CPU over the measured window is reported per delivered message, with the machine's busy share and the processes' memory (PSS).")
    var serverPid: [Int32] = []

    @Option(help: "Instead of messages: live text, one Whisperer typing to this many joined listeners (keystroke-to-listener latency).")
    var liveListeners = 0

    @Option(help: "With --live-listeners: keystrokes per second.")
    var keysPerSecond = 20

    @Option(help: "Instead of a run: delete this many accounts one at a time (each with a contact, messages taken and messages waiting) and report Redis's time per deletion and the key-space walks it answered, read from Redis at --redis.")
    var deletions = 0

    @Option(help: "With --deletions: Redis's URL (redis://host:port).")
    var redis: String?

    @Option(help: "With --deletions: first add this many other keys to Redis, as a server with many users holds.")
    var fillerKeys = 0

    @Option(help: "Instead of a run: time this many Ed25519 verifications of a message's signed bytes with each library the project links (libsodium, which the services use, and swift-crypto), interleaved, and print each one's time per verification.")
    var ed25519 = 0

    static func main() async {
        // Before any task starts: the generator's tasks run on NIO's event loops, as the
        // services' do, instead of hopping to a second thread pool per socket event.
        ServiceMain.useEventLoopsForConcurrency()
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }

    mutating func run() async throws {
        var logger = Logger(label: "whisper-load")
        logger.logLevel = .error
        let gateways = self.gateways
        if ed25519 > 0 {
            VerifySpeed(verifications: ed25519).run()
            return
        }
        if deletions > 0 {
            guard let redis else { throw LoadFailure("--deletions needs --redis") }
            try await DeletionLoad(gateways: gateways, accounts: deletions, fillerKeys: fillerKeys, redisURL: redis, logger: logger).run()
            return
        }
        if idleSockets > 0 {
            try await holdIdleSockets(gateways: gateways, logger: logger)
            return
        }
        if liveListeners > 0 {
            try await LiveLoad(gateways: gateways, listeners: liveListeners, keysPerSecond: keysPerSecond, duration: Int(duration), logger: logger).run()
            return
        }
        if let xmpp {
            try await runXMPP(url: xmpp)
            return
        }
        print("registering \(pairs * 2) identities over \(gateways.count) gateway(s)...")
        var senders: [Party] = []
        var recipients: [Party] = []
        for index in 0..<pairs {
            senders.append(try await Party.register(url: gateways[index % gateways.count], logger: logger))
            recipients.append(try await Party.register(url: gateways[(index + 1) % gateways.count], logger: logger))
        }
        if !strangers {
            for index in 0..<pairs {
                try await Party.introduce(senders[index], recipients[index], logger: logger)
            }
        }
        let perSender = rate / Double(pairs)
        // A paced run's messages, made before it starts (a task per sender).
        var prepared: [[PreparedMessage]] = Array(repeating: [], count: pairs)
        if !signAsSent, perSender > 0 {
            let count = Int(((warmup + duration) * perSender).rounded(.up)) + 1
            print("making \(count * pairs) messages ahead...")
            prepared = await withTaskGroup(of: (Int, [PreparedMessage]).self) { group in
                for index in 0..<pairs {
                    let (sender, recipient) = (senders[index], recipients[index])
                    group.addTask {
                        (index, PreparedMessage.make(count, from: (sender.whisperId, sender.keys), to: recipient.peer, sessionToken: sender.token))
                    }
                }
                var all: [[PreparedMessage]] = Array(repeating: [], count: pairs)
                for await (index, messages) in group { all[index] = messages }
                return all
            }
        }
        let clock = ContinuousClock()
        let start = clock.now
        let measureFrom = start + .milliseconds(Int64(warmup * 1000))
        let end = measureFrom + .milliseconds(Int64(duration * 1000))
        let stats = Stats()
        let server = measureServer(from: measureFrom, to: end)

        // Recipients first, so that the first messages find them connected. Senders
        // that all started together would send together: bursts of one message per
        // pair instead of a steady load, so each starts at its own phase.
        let eventLoop = MultiThreadedEventLoopGroup.singleton.any()
        var channels: [any Channel] = []
        for index in 0..<pairs {
            let (sender, recipient) = (senders[index], recipients[index])
            channels.append(try await LoadSocket.open(
                url: recipient.url,
                role: recipient.role(.recipient(peer: sender.peer, verify: verify, measureFrom: measureFrom), stats: stats),
                on: eventLoop
            ))
        }
        for index in 0..<pairs {
            let (sender, recipient) = (senders[index], recipients[index])
            let kind = LoadRole.Kind.sender(
                peer: recipient.peer,
                pace: SendPace(perSecond: perSender, phase: Double(index) / Double(pairs), arrivals: arrivals, window: window, end: end)
            )
            var role = sender.role(kind, stats: stats)
            role.prepared = prepared[index]
            channels.append(try await LoadSocket.open(url: sender.url, role: role, on: eventLoop))
        }
        // Two seconds after the last send for the last answers and deliveries.
        try await Task.sleep(until: end + .seconds(2))
        for channel in channels {
            try? await channel.close()
        }

        report(stats, server: await server.value)
    }

    /// The XMPP run (`--xmpp`): the same pace, window, warm-up and report as the Whisper one.
    func runXMPP(url: String) async throws {
        // Each stanza the size of the Whisper frame the message load sends.
        let keys = WhisperKeys(seed: SecureBytes.random(64))
        let me = PeerKeys(whisperId: "WSP-AAAA-BBBB-CCCC", encPublicKey: keys.encPublicKey, signPublicKey: keys.signPublicKey)
        let stanzaBytes = PreparedMessage(from: (me.whisperId, keys), to: me, sessionToken: SessionStore.newToken(), key: nil).frame.count
        print("signing in \(pairs * 2) XMPP users at \(url) (messages of \(stanzaBytes) bytes)...")
        let clock = ContinuousClock()
        let measureFrom = clock.now + .milliseconds(Int64(warmup * 1000))
        let end = measureFrom + .milliseconds(Int64(duration * 1000))
        let stats = Stats()
        let server = measureServer(from: measureFrom, to: end)
        let load = XMPPLoad(url: url, domain: xmppDomain, password: xmppPassword, pairs: pairs, stanzaBytes: stanzaBytes)
        let channels = try await load.open(
            perSender: rate / Double(pairs), arrivals: arrivals, window: window, measureFrom: measureFrom, end: end, stats: stats,
            on: MultiThreadedEventLoopGroup.singleton.any()
        )
        try await Task.sleep(until: end + .seconds(2))
        for channel in channels {
            try? await channel.close()
        }
        report(stats, server: await server.value)
    }

    /// Samples the server's usage (`--server-pid`) at the start and the end of the window.
    func measureServer(from start: ContinuousClock.Instant, to end: ContinuousClock.Instant) -> Task<(ServerUsage.Sample, ServerUsage.Sample)?, Never> {
        let usage = ServerUsage(roots: serverPid)
        return Task {
            guard !usage.roots.isEmpty else { return nil }
            try? await Task.sleep(until: start)
            let first = usage.sample()
            try? await Task.sleep(until: end)
            return (first, usage.sample())
        }
    }

    /// The run's figures, the server's usage over the window, and the generator's own CPU.
    private func report(_ stats: Stats, server: (ServerUsage.Sample, ServerUsage.Sample)? = nil) {
        let report = stats.report(seconds: duration)
        if timeline { print(stats.timeline()) }
        if let samples {
            do {
                try stats.samplesText().write(toFile: samples, atomically: true, encoding: .utf8)
            } catch {
                print("could not write \(samples): \(error)")
            }
        }
        print(report)
        if let (first, last) = server {
            print(ServerUsage(roots: serverPid).report(from: first, to: last, delivered: stats.measuredCount))
        }
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let cpuSeconds = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000_000
        print(String(format: "load generator CPU: %.1f s, %.3f ms per message sent", cpuSeconds, cpuSeconds * 1000 / Double(max(stats.sentCount, 1))))
    }
}

extension WhisperLoad {
    /// Starts `idleSockets` apps on the SDK's session object (`WhisperSession`), each a new
    /// identity signed in on a socket it keeps open (bound to its identity, holding its
    /// presence, pinging as an app does between messages, and reconnecting by itself if
    /// the socket goes), then reports the gateway's resident memory per socket.
    func holdIdleSockets(gateways: [String], logger: Logger) async throws {
        if lean {
            try await holdLeanIdleSockets(gateways: gateways, logger: logger)
            return
        }
        let count = idleSockets
        let before = rssOf.flatMap(Self.residentKiB)
        print("opening \(count) registered idle sockets over \(gateways.count) gateway(s)...")
        let started = ContinuousClock.now
        let sessions = try await Self.openAll(count, over: gateways, concurrency: concurrency) { url in
            let configuration = WhisperSession.Configuration(gateways: [url], deviceId: RandomID.uuid(), platform: .android)
            let session = WhisperSession(
                configuration: configuration, keys: try WhisperKeys(seed: SecureBytes.random(64)), credentials: nil, logger: logger
            )
            await session.start()
            for await state in session.states {
                switch state {
                case .connected: return session
                case .backingOff(let attempt, _) where attempt >= 3:
                    await session.stop()
                    throw LoadFailure("an idle app could not sign in (\(state))")
                case .signedOut:
                    throw LoadFailure("an idle app could not sign in (\(state))")
                default: continue
                }
            }
            throw LoadFailure("an idle app stopped before it signed in")
        }
        let opened = ContinuousClock.now - started
        print(String(format: "%d sockets registered and open after %.1f s", sessions.count, Double(opened.components.seconds)))
        if hold > 0 {
            // Written at once (print's buffer is flushed only at exit when stdout is a file).
            FileHandle.standardOutput.write(Data("holding \(sessions.count) sockets for \(Int(hold)) s\n".utf8))
            await Self.sleepUnlessTerminated(for: .milliseconds(Int64(hold * 1000)))
            for session in sessions { await session.stop() }
            return
        }
        // Let the gateway settle (buffers of the registration handed back) before reading.
        try await Task.sleep(for: .seconds(5))
        if let pid = rssOf, let before, let after = Self.residentKiB(pid) {
            let perSocket = Double(after - before) / Double(max(sessions.count, 1))
            print(String(format: "gateway resident memory: %d KiB before, %d KiB with %d idle sockets: %.1f KiB per socket",
                         before, after, sessions.count, perSocket))
        }
        for session in sessions { await session.stop() }
    }

    /// `--lean`: registers `idleSockets` identities through the SDK, then holds each on a
    /// `LoadSocket` with the idle role (bound, presence held, a `ping` every 20 s).
    func holdLeanIdleSockets(gateways: [String], logger: Logger) async throws {
        let count = idleSockets
        print("registering \(count) identities over \(gateways.count) gateway(s), then holding each on a lean socket...")
        let started = ContinuousClock.now
        let eventLoop = MultiThreadedEventLoopGroup.singleton.any()
        let stats = Stats()
        let channels = try await Self.openAll(count, over: gateways, concurrency: concurrency) { url in
            let party = try await Party.register(url: url, logger: logger)
            return try await LoadSocket.open(url: url, role: party.role(.idle(pingEvery: .seconds(20)), stats: stats), on: eventLoop)
        }
        let opened = ContinuousClock.now - started
        print(String(format: "%d sockets registered and open after %.1f s", channels.count, Double(opened.components.seconds)))
        FileHandle.standardOutput.write(Data("holding \(channels.count) sockets for \(Int(hold)) s\n".utf8))
        await Self.sleepUnlessTerminated(for: .milliseconds(Int64(max(hold, 0) * 1000)))
        let closed = channels.filter { !$0.isActive }.count
        if closed > 0 { print("\(closed) of the \(channels.count) sockets had closed") }
        for channel in channels { try? await channel.close() }
    }

    /// Makes `count` of something, each with the gateway URL it is to use (round robin),
    /// with at most `concurrency` being made at once.
    static func openAll<T: Sendable>(
        _ count: Int, over gateways: [String], concurrency: Int, _ open: @escaping @Sendable (String) async throws -> T
    ) async throws -> [T] {
        var opened: [T] = []
        opened.reserveCapacity(count)
        try await withThrowingTaskGroup(of: T.self) { group in
            var next = 0
            func addOne() {
                let url = gateways[next % gateways.count]
                next += 1
                group.addTask { try await open(url) }
            }
            for _ in 0..<min(max(1, concurrency), count) { addOne() }
            for try await one in group {
                opened.append(one)
                if next < count { addOne() }
            }
        }
        return opened
    }

    /// Sleeps `duration`, or until the process gets SIGTERM (which then no longer ends it).
    static func sleepUnlessTerminated(for duration: Duration) async {
        signal(SIGTERM, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGTERM)
        let (terminated, continuation) = AsyncStream<Void>.makeStream()
        source.setEventHandler { continuation.finish() }
        source.resume()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: duration) }
            group.addTask { for await _ in terminated {} }
            await group.next()
            group.cancelAll()
            continuation.finish()
        }
        source.cancel()
    }

    /// VmRSS of a process, in KiB.
    static func residentKiB(_ pid: Int32) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first.flatMap { Int($0) }
        }
        return nil
    }
}

/// Messages in flight (what was sent, and when) by messageId, and the latencies measured.
final class Stats: Sendable {
    private struct Sample {
        var sentMs: Double
        var latencyMs: Double
        /// Whole seconds since the start when it arrived.
        var second: Int { Int((sentMs + latencyMs) / 1_000) }
    }

    private struct State {
        var inFlight: [String: (message: Sent, at: ContinuousClock.Instant)] = [:]
        /// Per measured message, in arrival order: milliseconds since the start when it
        /// was sent, and its latency (the second it arrived in follows).
        var samples: [Sample] = []
        var acceptSamples: [(second: Int, latencyMs: Double)] = []
        var sent = 0
        var errors = 0
        /// What the errors were, by kind (a refusal's code, an unknown delivery, ...).
        var errorKinds: [String: Int] = [:]
    }

    /// What was sent, to compare a delivery with: a Whisper message, or an XMPP
    /// message's body text.
    private enum Sent {
        case whisper(SendMessage)
        case xmpp(body: String)
    }

    private let state = Mutex(State())
    private let start = ContinuousClock.now
    /// The start on CLOCK_MONOTONIC (as `perf` can stamp its events), for `--samples`.
    private let startMonotonicMs: Double = {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) * 1_000 + Double(now.tv_nsec) / 1_000_000
    }()

    /// p50, p99 and max per second of the run: shows whether slow messages come in bursts.
    func timeline() -> String {
        state.withLock { state in
            var lines: [String] = []
            let accepts = Dictionary(grouping: state.acceptSamples, by: \.second).mapValues { $0.map(\.latencyMs).sorted() }
            for (second, group) in Dictionary(grouping: state.samples, by: \.second).sorted(by: { $0.key < $1.key }) {
                let sorted = group.map(\.latencyMs).sorted()
                lines.append(String(
                    format: "  second %3d: %5d messages, p50 %6.2f ms, p99 %7.2f ms, max %7.2f ms; accepted p99 %7.2f ms",
                    second, sorted.count, percentile(sorted, 0.50), percentile(sorted, 0.99), sorted.last ?? 0,
                    percentile(accepts[second] ?? [], 0.99)
                ))
            }
            return lines.joined(separator: "\n")
        }
    }

    func sending(_ message: SendMessage) {
        sending(.whisper(message), id: message.messageId)
    }

    /// An XMPP message `id` with this body text.
    func sending(xmppId id: String, body: String) {
        sending(.xmpp(body: body), id: id)
    }

    private func sending(_ sent: Sent, id: String) {
        let now = ContinuousClock.now
        state.withLock {
            $0.inFlight[id] = (sent, now)
            $0.sent += 1
        }
    }

    func failed(_ kind: String) {
        state.withLock {
            $0.errors += 1
            $0.errorKinds[kind, default: 0] += 1
        }
    }

    /// Send to `message_accepted`, per second of the run (for `--timeline`).
    func accepted(after latency: Duration) {
        let now = ContinuousClock.now
        let ms = Double(latency.nanoseconds) / 1_000_000
        state.withLock { $0.acceptSamples.append((second(of: now), ms)) }
    }

    var sentCount: Int { state.withLock { $0.sent } }
    /// Deliveries measured (in the window).
    var measuredCount: Int { state.withLock { $0.samples.count } }

    /// Whole seconds since the generator started.
    private func second(of instant: ContinuousClock.Instant) -> Int {
        Int((instant - start).components.seconds)
    }

    /// Records a delivery. A message that differs in any signed or routed field from the
    /// one sent, or that was never sent, counts as an error and is not measured.
    func received(_ message: MessageReceived, measure: Bool) {
        arrived(id: message.messageId, measure: measure) { sent in
            guard case .whisper(let sent) = sent else { return false }
            return sent.from == message.from && sent.to == message.to && sent.msgType == message.msgType
                && sent.timestamp == message.timestamp && sent.nonce == message.nonce && sent.ciphertext == message.ciphertext
                && sent.sig == message.sig && message.groupId == nil
        }
    }

    /// Records the delivery of XMPP message `id` with this body text.
    func received(xmppId id: String, body: Substring, measure: Bool) {
        arrived(id: id, measure: measure) { sent in
            guard case .xmpp(let text) = sent else { return false }
            return text == body
        }
    }

    private func arrived(id: String, measure: Bool, matches: (Sent) -> Bool) {
        let now = ContinuousClock.now
        state.withLock { state in
            guard let (sent, sentAt) = state.inFlight.removeValue(forKey: id) else {
                state.errors += 1
                state.errorKinds["delivered twice or never sent", default: 0] += 1
                return
            }
            guard matches(sent) else {
                state.errors += 1
                state.errorKinds["delivered altered", default: 0] += 1
                return
            }
            if measure {
                state.samples.append(Sample(
                    sentMs: Double((sentAt - start).nanoseconds) / 1_000_000, latencyMs: Double((now - sentAt).nanoseconds) / 1_000_000
                ))
            }
        }
    }

    /// A line naming the start on CLOCK_MONOTONIC, then one line per measured message,
    /// in arrival order: milliseconds since the start when it was sent, and its latency
    /// in milliseconds.
    func samplesText() -> String {
        state.withLock { state in
            String(format: "# start %.3f ms on CLOCK_MONOTONIC\n", startMonotonicMs)
                + state.samples.map { String(format: "%.3f %.3f", $0.sentMs, $0.latencyMs) }.joined(separator: "\n") + "\n"
        }
    }

    func report(seconds: Double) -> String {
        state.withLock { state in
            let sorted = state.samples.map(\.latencyMs).sorted()
            let throughput = Double(sorted.count) / seconds
            let kinds = state.errorKinds.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
            return String(
                format: "received %d messages in %.0f s: %.0f messages/s; latency ms p50 %.2f p95 %.2f p99 %.2f max %.2f; sent %d, errors %d",
                sorted.count, seconds, throughput, percentile(sorted, 0.50), percentile(sorted, 0.95), percentile(sorted, 0.99),
                sorted.last ?? .nan, state.sent, state.errors
            ) + (kinds.isEmpty ? "" : " (" + kinds.joined(separator: ", ") + ")")
        }
    }
}

/// One registered identity: its keys and session. Registration goes through the SDK;
/// the load itself through a `LoadSocket`, which binds to the session on a new socket.
struct Party: Sendable {
    let url: String
    let whisperId: String
    let keys: WhisperKeys
    let token: String

    var peer: PeerKeys { PeerKeys(whisperId: whisperId, encPublicKey: keys.encPublicKey, signPublicKey: keys.signPublicKey) }

    static func register(url: String, logger: Logger) async throws -> Party {
        let keys = WhisperKeys(seed: SecureBytes.random(64))
        let connection = WhisperConnection(url: url, logger: logger)
        try await connection.connect()
        let ack = try await connection.register(keys: keys, deviceId: RandomID.uuid(), platform: .android)
        await connection.close()
        return Party(url: url, whisperId: ack.whisperId, keys: keys, token: ack.sessionToken)
    }

    /// Makes `a` and `b` direct peers as contacts are: a message each way, taken from
    /// the queue and acknowledged.
    static func introduce(_ a: Party, _ b: Party, logger: Logger) async throws {
        var sockets: [WhisperConnection] = []
        for party in [a, b] {
            let connection = WhisperConnection(url: party.url, logger: logger)
            try await connection.connect()
            await connection.resume(whisperId: party.whisperId, sessionToken: party.token)
            sockets.append(connection)
        }
        for (from, to) in [(0, 1), (1, 0)] {
            let (sender, recipient) = from == 0 ? (a, b) : (b, a)
            let hello = MessageCrypto.makeMessage(Array("hello".utf8), from: (sender.whisperId, sender.keys), to: recipient.peer, sessionToken: sender.token)
            _ = try await sockets[from].send(hello)
            for message in try await sockets[to].fetchPending().messages { try await sockets[to].acknowledge(message) }
        }
        for socket in sockets { await socket.close() }
    }

    func role(_ kind: LoadRole.Kind, stats: Stats) -> LoadRole {
        LoadRole(whisperId: whisperId, keys: keys, sessionToken: token, kind: kind, stats: stats)
    }
}

enum Arrivals: String, ExpressibleByArgument, Sendable {
    case even, poisson
}

/// The nearest-rank percentile of sorted values (NaN for none).
private func percentile(_ sorted: [Double], _ p: Double) -> Double {
    guard !sorted.isEmpty else { return .nan }
    return sorted[min(sorted.count - 1, max(0, Int((Double(sorted.count) * p).rounded(.up)) - 1))]
}

/// Why a load run stopped.
struct LoadFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
