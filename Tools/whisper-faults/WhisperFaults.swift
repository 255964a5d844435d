import ArgumentParser
import Foundation
import Logging
import Synchronization
import WhisperClient
import WhisperShared

/// Steady messaging through the SDK's `WhisperSession` while `scripts/faults` kills and
/// restarts parts of the stack; every messageId is accounted for.
@main
struct WhisperFaults: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "whisper-faults",
        abstract: "Steady SDK traffic that counts every message through faults (scripts/faults runs it)."
    )

    @Option(name: .customLong("gateway"), help: "Gateway WebSocket URL; repeat for several (clients move to the next on a failure).")
    var gateways: [String] = ["ws://127.0.0.1:8080/ws"]

    @Option(help: "Sender/recipient pairs.")
    var pairs = 20

    @Option(help: "Messages per second over all pairs.")
    var rate = 200.0

    @Option(help: "Seconds of sending.")
    var duration = 60.0

    @Option(help: "Seconds to wait after sending for answers and deliveries (recipients walk their queues).")
    var drain = 60.0

    @Option(help: "A file that gets one line '<unix ms> <name>' per fault; read at the end to work out recovery times.")
    var faults: String?

    @Option(help: "Write the report (JSON) here as well as to standard output.")
    var report: String?

    mutating func run() async throws {
        var logger = Logger(label: "whisper-faults")
        logger.logLevel = .critical
        let gateways = self.gateways
        let ledger = Ledger()
        say("registering \(pairs * 2) identities...")
        var users: [FaultClient] = []
        var connections: [WhisperConnection] = []
        for index in 0..<(pairs * 2) {
            let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            let connection = WhisperConnection(url: gateways[index % gateways.count], logger: logger)
            try await connection.connect()
            let ack = try await connection.register(keys: keys, deviceId: RandomID.uuid(), platform: .ios)
            connections.append(connection)
            users.append(FaultClient(
                whisperId: ack.whisperId, keys: keys, token: ack.sessionToken, expiresAt: ack.sessionExpiresAt,
                gateways: Array(gateways[(index % gateways.count)...] + gateways[..<(index % gateways.count)]),
                ledger: ledger, logger: logger
            ))
        }
        // Each pair is a conversation, as between contacts: one message each way, taken
        // and acknowledged, so that the recipient's queue takes the sender's messages
        // beyond a stranger's share while the recipient is away.
        for index in 0..<pairs {
            let (a, b) = (index * 2, index * 2 + 1)
            try await Self.hello(from: (users[a], connections[a]), to: (users[b], connections[b]))
            try await Self.hello(from: (users[b], connections[b]), to: (users[a], connections[a]))
        }
        for connection in connections { await connection.close() }
        let started = Clock.millisecondsNow()
        say("sending \(rate) messages/s over \(pairs) pairs for \(duration) s (start \(started))")
        let perSender = rate / Double(pairs)
        let count = Int(perSender * duration)
        let deadline = ContinuousClock.now + .milliseconds(Int64((duration + drain) * 1000))
        let users_ = users
        let pairs = self.pairs
        await withTaskGroup(of: Void.self) { group in
            for user in users_ {
                group.addTask { await user.stayConnected(until: deadline) }
            }
            await withTaskGroup(of: Void.self) { senders in
                for index in 0..<pairs {
                    let (sender, recipient) = (users_[index * 2], users_[index * 2 + 1])
                    senders.addTask {
                        await sender.send(count, perSecond: perSender, phase: Double(index) / Double(pairs), to: recipient, until: deadline)
                    }
                }
            }
            // Sending is over: wait until every accepted message has arrived, walking
            // queues now and then as an app woken by a push would.
            func unsent() async -> Int {
                var count = 0
                for user in users_ { count += await user.unsent() }
                return count
            }
            while ContinuousClock.now < deadline {
                let waiting = await unsent()
                if waiting == 0, ledger.missing() == 0 { break }
                for index in 0..<pairs { await users_[index * 2 + 1].walkQueue() }
                try? await Task.sleep(for: .seconds(1))
            }
            for user in users_ { await user.stop() }
        }
        let faultTimes = try faults.map(Self.readFaults) ?? []
        let result = ledger.report(started: started, rate: rate, faults: faultTimes)
        let json = String(decoding: try JSONSerialization.data(withJSONObject: result, options: [.prettyPrinted, .sortedKeys]), as: UTF8.self)
        say(json)
        if let report { try json.write(toFile: report, atomically: true, encoding: .utf8) }
    }

    /// One message from `sender` to `recipient`, which takes it from its queue and
    /// acknowledges it.
    static func hello(from sender: (FaultClient, WhisperConnection), to recipient: (FaultClient, WhisperConnection)) async throws {
        let message = MessageCrypto.makeMessage(
            Array("hello".utf8), from: (sender.0.whisperId, sender.0.keys), to: await recipient.0.peer, sessionToken: sender.0.token
        )
        _ = try await sender.1.send(message)
        for received in try await recipient.1.fetchPending().messages {
            try await recipient.1.acknowledge(received)
        }
    }

    /// Written at once, not buffered: scripts/faults waits for "sending".
    func say(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    static func readFaults(_ path: String) throws -> [(ms: Int64, name: String)] {
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        return try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, let ms = Int64(parts[0]) else { return nil }
            return (ms, String(parts[1]))
        }
    }
}

/// Every message's story: first send attempt, acceptance, attempts, first and later arrivals.
final class Ledger: Sendable {
    struct Entry {
        /// When the app queued it (latency and recovery count from here).
        var queuedAt: Int64
        var acceptedAt: Int64?
        var attempts = 0
        var gaveUp = false
        var refused: String?
        var receivedAt: Int64?
        var copies = 0
        /// Copies the client's dedupe let through (shown to the user).
        var shown = 0
    }

    private let entries = Mutex<[String: Entry]>([:])

    func queued(_ id: String) {
        let now = Clock.millisecondsNow()
        entries.withLock { $0[id] = $0[id] ?? Entry(queuedAt: now) }
    }

    func tried(_ id: String, times: Int) {
        entries.withLock { $0[id]?.attempts = times }
    }

    func accepted(_ id: String) {
        let now = Clock.millisecondsNow()
        entries.withLock { entries in
            if entries[id]?.acceptedAt == nil { entries[id]?.acceptedAt = now }
        }
    }

    func failed(_ id: String, refused code: String?) {
        entries.withLock { entries in
            entries[id]?.gaveUp = code == nil
            entries[id]?.refused = code
        }
    }

    /// A copy arrived (live or in a page); `shown` when the client's dedupe let it through.
    func received(_ id: String, shown: Bool) {
        let now = Clock.millisecondsNow()
        entries.withLock { entries in
            // A message can arrive before its sender heard it was accepted.
            var entry = entries[id] ?? Entry(queuedAt: now)
            entry.copies += 1
            if shown { entry.shown += 1 }
            if entry.receivedAt == nil { entry.receivedAt = now }
            entries[id] = entry
        }
    }

    /// Accepted messages that have not arrived yet.
    func missing() -> Int {
        entries.withLock { $0.values.filter { $0.acceptedAt != nil && $0.receivedAt == nil }.count }
    }

    /// A message slower than this was held up by a fault (normal delivery takes a few ms).
    static let slowMs: Int64 = 500

    func report(started: Int64, rate: Double, faults: [(ms: Int64, name: String)]) -> [String: Any] {
        let all = entries.withLock { Array($0.values) }
        let accepted = all.filter { $0.acceptedAt != nil }
        let lost = accepted.filter { $0.receivedAt == nil }.count
        // Received without an acceptance the sender heard (it gave up, or the answer was lost).
        let unconfirmed = all.filter { $0.acceptedAt == nil && $0.receivedAt != nil }.count
        let latencies = all.compactMap { entry in entry.receivedAt.map { $0 - entry.queuedAt } }.sorted()
        func percentile(_ p: Double) -> Int64 { latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] }
        var faultReports: [[String: Any]] = []
        for (index, fault) in faults.enumerated() {
            let next = index + 1 < faults.count ? faults[index + 1].ms : Int64.max
            // Recovered once delivery is back to normal: the arrival of the last message,
            // queued from a second before the fault on, that took longer than `slow`.
            let window = all.filter { $0.queuedAt >= fault.ms - 1_000 && $0.queuedAt < next }
            let lastSlow = window.compactMap { entry -> Int64? in
                // What the next fault held up is that fault's.
                guard let receivedAt = entry.receivedAt, receivedAt < next else { return nil }
                return receivedAt - entry.queuedAt > Self.slowMs ? receivedAt : nil
            }.max()
            let recovered = lastSlow.map { max(0, $0 - fault.ms) } ?? 0
            let around = window.filter { $0.queuedAt < fault.ms + recovered }
            faultReports.append([
                "fault": fault.name,
                "atMs": fault.ms - started,
                "recoveryMs": recovered,
                "messagesCaught": around.count,
                "resends": around.map { max(0, $0.attempts - 1) }.reduce(0, +),
                "maxLatencyMs": around.compactMap { entry in entry.receivedAt.map { $0 - entry.queuedAt } }.max() ?? -1,
            ])
        }
        return [
            "offeredRate": rate,
            "messages": all.count,
            "accepted": accepted.count,
            "lost": lost,
            "receivedDistinct": all.filter { $0.receivedAt != nil }.count,
            "copiesReceived": all.map(\.copies).reduce(0, +),
            "duplicatesAfterDedupe": all.map { max(0, $0.shown - 1) }.reduce(0, +),
            "gaveUp": all.filter(\.gaveUp).count,
            "refused": all.compactMap(\.refused).count,
            "receivedWithoutAcceptance": unconfirmed,
            "resends": all.map { max(0, $0.attempts - 1) }.reduce(0, +),
            "latencyMs": ["p50": percentile(0.5), "p99": percentile(0.99), "max": latencies.last ?? 0],
            "faults": faultReports,
            // The five slowest, each as ms from the run's start: where a fault held them.
            "slowest": all.compactMap { entry in entry.receivedAt.map { (entry, $0) } }
                .sorted { $0.1 - $0.0.queuedAt > $1.1 - $1.0.queuedAt }.prefix(5).map { entry, receivedAt in
                    [
                        "queuedMs": entry.queuedAt - started, "acceptedMs": entry.acceptedAt.map { $0 - started } ?? -1,
                        "receivedMs": receivedAt - started, "attempts": entry.attempts,
                    ]
                },
        ]
    }
}

/// One app: the SDK's session object keeps it connected (backoff with jitter, draining
/// gateways, dead sockets, its pending queue walked on every connect) and sends its
/// outbox (same messageId on every try); the client only counts.
actor FaultClient {
    let whisperId: String
    let keys: WhisperKeys
    let token: String
    let ledger: Ledger
    let session: WhisperSession
    private var stopped = false

    init(whisperId: String, keys: WhisperKeys, token: String, expiresAt: Int64, gateways: [String], ledger: Ledger, logger: Logger) {
        self.whisperId = whisperId
        self.keys = keys
        self.token = token
        self.ledger = ledger
        var configuration = WhisperSession.Configuration(gateways: gateways, deviceId: RandomID.uuid(), platform: .ios)
        configuration.backoff = .init(initial: .milliseconds(100), maximum: .seconds(2))
        // A session lost with Redis is this client's own: it takes it back from the keys.
        session = WhisperSession(
            configuration: configuration, keys: keys,
            credentials: SessionCredentials(whisperId: whisperId, sessionToken: token, expiresAt: expiresAt), logger: logger
        )
    }

    var peer: PeerKeys { PeerKeys(whisperId: whisperId, encPublicKey: keys.encPublicKey, signPublicKey: keys.signPublicKey) }

    /// Runs the session and counts what it hands over until `deadline`.
    func stayConnected(until deadline: ContinuousClock.Instant) async {
        let session = self.session, ledger = self.ledger
        await session.start()
        let counting = Task {
            for await event in session.events {
                switch event {
                case .message(let message):
                    // The session shows each message once; a second one here is a duplicate.
                    ledger.received(message.messageId, shown: true)
                    try? await session.acknowledge(message)
                case .outgoing(let messageId, let state):
                    if [.sent, .delivered, .read].contains(state) { ledger.accepted(messageId) }
                default:
                    break
                }
            }
        }
        while !stopped, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(100)) }
        counting.cancel()
    }

    func stop() async {
        stopped = true
        await session.stop()
        // Attempts and outcomes as the outbox kept them.
        for message in (try? await session.outbox.all()) ?? [] {
            ledger.tried(message.message.messageId, times: message.attempts)
            switch message.state {
            case .failed:
                let refused = message.attempts < RetryPolicy().maxAttempts ? (message.lastError ?? "refused") : nil
                ledger.failed(message.message.messageId, refused: refused)
            case .queued, .sending:
                // Still unsent when the run ended: given up.
                ledger.failed(message.message.messageId, refused: nil)
            case .sent, .delivered, .read:
                // Accepted (its event may have come after the counting stopped).
                ledger.accepted(message.message.messageId)
            }
        }
    }

    /// Messages of the outbox the server has not accepted yet (nor refused for good).
    func unsent() async -> Int {
        ((try? await session.outbox.all()) ?? []).filter { $0.state == .queued || $0.state == .sending }.count
    }

    /// Walks the pending queue once (as an app woken by a push would).
    func walkQueue() async {
        try? await session.fetchPending()
    }

    /// Queues `count` messages to `peer` at `perSecond`; the session sends each until
    /// accepted.
    func send(_ count: Int, perSecond: Double, phase: Double, to recipient: FaultClient, until deadline: ContinuousClock.Instant) async {
        let interval = 1.0 / perSecond
        let start = ContinuousClock.now + .milliseconds(Int64(phase * interval * 1000))
        let peer = await recipient.peer
        for index in 0..<count {
            try? await Task.sleep(until: start + .milliseconds(Int64(Double(index) * interval * 1000)))
            let message = MessageCrypto.makeMessage(
                Array("message \(index)".utf8), from: (whisperId, keys), to: peer, sessionToken: token
            )
            ledger.queued(message.messageId)
            try? await session.send(message)
        }
    }
}
