import Foundation
import WhisperProtocol

/// Where an outgoing message is in its life (docs/sdk.md):
/// queued (persisted) → sending → sent (server ACK) → delivered (peer receipt) → read.
public enum OutgoingState: String, Codable, Sendable, Comparable {
    case queued, sending, sent, delivered, read, failed

    var rank: Int {
        switch self {
        case .queued: 0
        case .sending: 1
        case .sent: 2
        case .delivered: 3
        case .read: 4
        case .failed: 5
        }
    }

    public static func < (a: OutgoingState, b: OutgoingState) -> Bool { a.rank < b.rank }
}

/// One outgoing message (or one copy of a group message) and its delivery state.
public struct OutgoingMessage: Codable, Sendable, Equatable {
    /// The signed frame, sent as it is on every attempt (same messageId: idempotent).
    public var message: SendMessage
    /// The group, when this is one member's copy of a group message (sent as
    /// `group_send_message`; the copies share the messageId and are told apart by `to`).
    public var groupId: String?
    public var state: OutgoingState
    /// Attempts so far.
    public var attempts: Int
    /// When the next attempt may start (ms since 1970).
    public var nextAttemptAt: Int64
    /// Why the last attempt failed, for the app's UI and logs.
    public var lastError: String?
    /// When the server accepted it (ms since 1970, this device's clock).
    public var sentAt: Int64?

    /// What names it in the outbox: the messageId, and the recipient (a group message's
    /// copies share the messageId).
    public var key: String { message.messageId + " " + message.to }
}

/// Keeps the outbox across app restarts (docs/sdk.md). Apps back it with their database;
/// `FileOutboxStore` and `MemoryOutboxStore` are provided. A change records only the
/// entries it touched; the queue replaces the whole record once it has grown past twice
/// what the outbox holds.
public protocol OutboxStore: Sendable {
    /// Every entry, in the order first recorded (since its last removal), as last recorded.
    func load() async throws -> [OutgoingMessage]
    /// Records the new state of `changed` (an entry not held yet goes last) and the
    /// removal of the entries named in `removed` (`OutgoingMessage.key`).
    func record(_ changed: [OutgoingMessage], removed: [String]) async throws
    /// Replaces the whole record with `messages`.
    func replace(with messages: [OutgoingMessage]) async throws
}

extension [OutgoingMessage] {
    /// `record` applied to an outbox in memory.
    mutating func apply(_ changed: [OutgoingMessage], removed: [String]) {
        if !removed.isEmpty {
            let gone = Set(removed)
            removeAll { gone.contains($0.key) }
        }
        for entry in changed {
            if let index = firstIndex(where: { $0.key == entry.key }) { self[index] = entry } else { append(entry) }
        }
    }
}

/// An outbox that lives as long as the process (tests, tools).
public actor MemoryOutboxStore: OutboxStore {
    private var messages: [OutgoingMessage] = []
    public init() {}
    public func load() async throws -> [OutgoingMessage] { messages }
    public func record(_ changed: [OutgoingMessage], removed: [String]) async throws { messages.apply(changed, removed: removed) }
    public func replace(with messages: [OutgoingMessage]) async throws { self.messages = messages }
}

/// The outbox as a file of JSON lines: each change appends the entries it touched (or
/// their removal), and the queue's compaction replaces the file atomically. A line cut
/// short by a crash is skipped when the file is read.
public actor FileOutboxStore: OutboxStore {
    public let url: URL
    public init(url: URL) { self.url = url }

    /// One line: an entry's new state, or the key of one removed.
    struct Line: Codable {
        var set: OutgoingMessage?
        var remove: String?
    }

    public func load() async throws -> [OutgoingMessage] {
        guard FileManager.default.fileExists(atPath: url.path) else { return [] }
        let decoder = JSONDecoder()
        var messages: [OutgoingMessage] = []
        for text in try Data(contentsOf: url).split(separator: UInt8(ascii: "\n")) {
            guard let line = try? decoder.decode(Line.self, from: Data(text)) else { continue }
            messages.apply(line.set.map { [$0] } ?? [], removed: line.remove.map { [$0] } ?? [])
        }
        return messages
    }

    public func record(_ changed: [OutgoingMessage], removed: [String]) async throws {
        let lines = removed.map { Line(set: nil, remove: $0) } + changed.map { Line(set: $0, remove: nil) }
        guard !lines.isEmpty else { return }
        try Self.encode(lines).appendLines(to: url)
    }

    public func replace(with messages: [OutgoingMessage]) async throws {
        try Self.encode(messages.map { Line(set: $0, remove: nil) }).write(to: url, options: .atomic)
    }

    static func encode(_ lines: [Line]) throws -> Data {
        let encoder = JSONEncoder()
        var data = Data()
        for line in lines { data += try encoder.encode(line) + Data("\n".utf8) }
        return data
    }
}

/// The retry policy (docs/sdk.md): exponential backoff with full jitter, at most 10 attempts.
public struct RetryPolicy: Sendable, Equatable {
    public var maxAttempts: Int
    public var initial: Duration
    public var maximum: Duration

    public init(maxAttempts: Int = 10, initial: Duration = .milliseconds(500), maximum: Duration = .seconds(60)) {
        self.maxAttempts = maxAttempts
        self.initial = initial
        self.maximum = maximum
    }

    /// The delay before attempt `attempt + 1`, random in (0, min(maximum, initial * 2^attempt)].
    public func delay(afterAttempt attempt: Int) -> Duration {
        var backoff = Backoff(policy: .init(initial: initial, maximum: maximum))
        for _ in 0..<attempt { _ = backoff.next() }
        return backoff.next()
    }
}

/// The client's outbox: persists every message before sending, sends in order, retries
/// with backoff (sends are idempotent by messageId, so a retry never duplicates), and
/// moves each message through its states as the ACK and receipts arrive.
public actor SendQueue {
    /// Sends one frame (`send_message`, or `group_send_message` when `groupId` is set).
    public typealias Transport = @Sendable (OutgoingMessage) async throws -> Void

    private let store: any OutboxStore
    private let policy: RetryPolicy
    private var messages: [OutgoingMessage] = []
    private var loaded = false
    /// Lines in the store's record since it was last replaced (about: a fresh load counts
    /// the entries it found).
    private var recorded = 0

    public init(store: any OutboxStore, policy: RetryPolicy = RetryPolicy()) {
        self.store = store
        self.policy = policy
    }

    /// Puts a message in the outbox (state `queued`), persisted before anything is sent.
    public func enqueue(_ message: SendMessage) async throws {
        try await enqueue([OutgoingMessage(message: message, groupId: nil, state: .queued, attempts: 0, nextAttemptAt: 0, lastError: nil)])
    }

    /// Puts a group message's copies in the outbox (``MessageCrypto/makeGroupCopies(_:groupId:from:to:sessionToken:msgType:messageId:timestamp:replyTo:attachment:directoryHead:)``):
    /// each is sent, retried and receipted on its own, under the message's one messageId.
    public func enqueue(group copies: [GroupSendMessage]) async throws {
        try await enqueue(copies.map {
            OutgoingMessage(
                message: SendMessage(sessionToken: $0.sessionToken, $0.fields.message), groupId: $0.fields.groupId,
                state: .queued, attempts: 0, nextAttemptAt: 0, lastError: nil
            )
        })
    }

    private func enqueue(_ new: [OutgoingMessage]) async throws {
        try await load()
        let known = Set(messages.map(\.key))
        let added = new.filter { !known.contains($0.key) }
        guard !added.isEmpty else { return }
        messages += added
        try await persist(added.map(\.key))
    }

    /// Tries every message that is due, oldest first. `transport` sends one frame and
    /// returns when the server accepted it (`message_accepted`), or throws. A socket
    /// that closed (`WhisperClientError.closed`, `.notConnected`) spends no attempt and
    /// ends the flush: the next socket's flush goes on from there. Once the server
    /// accepts one, messages waiting out a backoff from earlier failures go too.
    /// `settled` hears each message this flush moved to `sent` or `failed`.
    public func flush(
        now: Int64 = Clock.millisecondsNow(), using transport: Transport,
        settled: @Sendable (_ messageId: String, _ state: OutgoingState) async -> Void = { _, _ in }
    ) async throws {
        try await load()
        // Messages are named by ID, never by position: while a send is awaited, another
        // call on this actor (`enqueue`, `pruneFinished`) may change the array.
        var tried: Set<String> = []
        while true {
            var accepted = false
            while let id = messages.first(where: {
                ($0.state == .queued || $0.state == .sending) && $0.nextAttemptAt <= now && !tried.contains($0.key)
            })?.key {
                tried.insert(id)
                guard let sending = change(id, { $0.state = .sending; $0.attempts += 1 }) else { continue }
                try await persist([id])
                do {
                    try await transport(sending)
                    change(id) { $0.state = .sent; $0.lastError = nil; $0.sentAt = Clock.millisecondsNow() }
                    accepted = true
                } catch WhisperClientError.closed, WhisperClientError.notConnected {
                    // The socket went before the frame did: not an attempt. The rest waits for
                    // the next socket.
                    change(id) { $0.attempts -= 1; $0.state = .queued }
                    try await persist([id])
                    return
                } catch {
                    let policy = self.policy
                    change(id) { entry in
                        entry.lastError = String(describing: error)
                        if entry.attempts >= policy.maxAttempts || Self.isFinal(error) {
                            entry.state = .failed
                        } else {
                            entry.state = .queued
                            entry.nextAttemptAt = now + Int64(policy.delay(afterAttempt: entry.attempts - 1).milliseconds)
                        }
                    }
                }
                let entry = messages.first(where: { $0.key == id })
                try await persist([id])
                if let entry, entry.state != .queued { await settled(entry.message.messageId, entry.state) }
            }
            // The server took a message: what waits behind a backoff from its failures
            // before goes now rather than when its backoff ends.
            let waiting = messages.indices.filter {
                messages[$0].state == .queued && messages[$0].nextAttemptAt > now && !tried.contains(messages[$0].key)
            }
            guard accepted, !waiting.isEmpty else { return }
            for index in waiting { messages[index].nextAttemptAt = now }
        }
    }

    /// Changes the message `id` (found now, by ID); the message as changed, nil when it
    /// is no longer in the outbox.
    @discardableResult
    private func change(_ id: String, _ body: (inout OutgoingMessage) -> Void) -> OutgoingMessage? {
        guard let index = messages.firstIndex(where: { $0.key == id }) else { return nil }
        body(&messages[index])
        return messages[index]
    }

    /// When the next queued message is due (ms since 1970), or nil when none waits.
    public func nextAttemptAt() async throws -> Int64? {
        try await load()
        return messages.filter { $0.state == .queued }.map(\.nextAttemptAt).min()
    }

    /// A refusal no retry can change (the message itself, its sender or its recipient
    /// is refused); over a limit, a server error or a lost session are worth another try.
    static func isFinal(_ error: any Error) -> Bool {
        guard case WhisperClientError.refused(let code, _) = error else { return false }
        switch code {
        case .authFailed, .invalidPayload, .userBanned, .notFound, .forbidden: return true
        case .notRegistered, .invalidTimestamp, .rateLimited, .internalError: return false
        }
    }

    /// Applies a `message_delivered` receipt (`from`: the recipient it names, which tells
    /// a group message's copies apart; without it, every copy): states only move forward.
    public func receipt(messageId: String, status: ReceiptStatus, from recipient: String? = nil) async throws {
        try await load()
        let next: OutgoingState = status == .read ? .read : .delivered
        var changed: [String] = []
        for index in messages.indices where messages[index].message.messageId == messageId && (recipient == nil || messages[index].message.to == recipient) {
            if messages[index].state < next {
                messages[index].state = next
                changed.append(messages[index].key)
            }
        }
        if !changed.isEmpty { try await persist(changed) }
    }

    /// Where a message is (a group message: its least advanced copy), or nil for one the
    /// outbox does not hold.
    public func state(of messageId: String) async throws -> OutgoingState? {
        try await load()
        return messages.filter { $0.message.messageId == messageId }.map(\.state).min()
    }

    /// Every message in the outbox, oldest first.
    public func all() async throws -> [OutgoingMessage] {
        try await load()
        return messages
    }

    /// Drops delivered and read messages from the outbox now (the queue keeps the newest
    /// `settledKept` of them and of the failed ones by itself).
    public func pruneFinished() async throws {
        try await load()
        let finished = messages.filter { $0.state == .delivered || $0.state == .read }.map(\.key)
        try await persist([], removed: finished)
    }

    /// Records the entries `keys` as they are now, with the removal of `removed` and of
    /// what `pruned` finds, and replaces the whole record once it has grown past twice
    /// the outbox.
    private func persist(_ keys: [String], removed: [String] = []) async throws {
        let gone = removed + pruned()
        if !gone.isEmpty { messages.apply([], removed: gone) }
        let wanted = Set(keys)
        let changed = messages.filter { wanted.contains($0.key) }
        try await store.record(changed, removed: gone)
        recorded += changed.count + gone.count
        if recorded > 2 * messages.count + 64 {
            try await store.replace(with: messages)
            recorded = messages.count
        }
    }

    /// What the outbox no longer needs: settled messages (delivered, read or failed) past
    /// the newest `settledKept`, oldest first, and sent ones older than `sentKeptMs`,
    /// whose receipt can no longer come (the server keeps a message, and a receipt for
    /// its offline sender, 72 hours each).
    private func pruned(now: Int64 = Clock.millisecondsNow()) -> [String] {
        var drop: [String] = []
        let settled = messages.filter { $0.state >= .delivered }
        if settled.count > Self.settledKept {
            drop += settled.prefix(settled.count - Self.settledKept).map(\.key)
        }
        drop += messages.filter { $0.state == .sent && ($0.sentAt ?? now) < now - Self.sentKeptMs }.map(\.key)
        return drop
    }

    /// How many settled messages the outbox keeps for the app to look up.
    public static let settledKept = 1_000
    /// How long a sent message waits for its receipt: 7 days.
    public static let sentKeptMs: Int64 = 7 * 24 * 3_600_000

    private func load() async throws {
        guard !loaded else { return }
        messages = try await store.load()
        recorded = messages.count
        loaded = true
    }
}

extension Data {
    /// Appends these whole lines to the file at `url` (made, atomically, when missing):
    /// the stores that are records of JSON lines (`FileOutboxStore`, `FileDeliveredStore`).
    func appendLines(to url: URL) throws {
        guard FileManager.default.fileExists(atPath: url.path) else {
            try write(to: url, options: .atomic)
            return
        }
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: self)
    }
}
