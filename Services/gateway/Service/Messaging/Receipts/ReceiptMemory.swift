import NIOCore
import Synchronization
import WhisperMessaging
import WhisperShared

/// What this gateway remembers of recent receipts, in one place: each status of a
/// message's receipt taken here (so a repeat is known until Redis shows it), messages
/// written here to their recipient with their sender's socket (their receipt needs no
/// look-up), and, for one written while stored, the store's answer (`Settling`).
/// Bounded by count and age; docs/architecture.md, "In-process memories of shared state".
final class ReceiptMemory: Sendable {
    struct Delivery: Equatable {
        let sender: String
        /// The `ClientConnection.id` the sender's message was read from.
        let senderConnection: String
        /// The gateway holding that socket when it is not this one (the message came
        /// through its channel, `DeliveryOrigin`); nil for this instance's own socket.
        var senderGateway: String? = nil
        /// For a message written before its store answered: that answer, once given.
        var settling: Settling? = nil

        static func == (a: Delivery, b: Delivery) -> Bool {
            a.sender == b.sender && a.senderConnection == b.senderConnection && a.senderGateway == b.senderGateway
                && a.settling === b.settling
        }
    }

    /// The store's answer for a message delivered while it was stored, once the sender
    /// was told it (`Answer`). A receipt waits for it (`outcome(within:)`) at most a
    /// bound, after which Redis, which is always right, is asked instead; so a store that
    /// never answers (a lost connection, an entry evicted here before its answer) holds
    /// no receipt for good. Its `delivered` receipt may ride in the store (`ride`).
    final class Settling: Sendable {
        enum Answer: Equatable {
            /// Refused, or the store failed: the sender was told so, or nothing.
            case refused
            /// Stored (now or before), and the sender was given `message_accepted`.
            case stored
            /// Stored with its `delivered` receipt (`ReceiptRide`): the sender was given
            /// `message_accepted` and then `message_delivered`.
            case storedWithReceipt
        }

        /// A receipt waiting for the answer, and when it stops waiting.
        private struct Waiter {
            var id: Int
            var continuation: CheckedContinuation<Answer?, Never>
            var deadline: Scheduled<Void>
        }

        private struct State {
            var answer: Answer?
            var waiting: [Waiter] = []
            var nextId = 0
        }

        private let state = Mutex(State())
        /// The seat of the message's `delivered` receipt in its store.
        let ride = ReceiptRide()

        /// Gives the answer to every receipt waiting for it (the first answer counts).
        func settle(_ answer: Answer) {
            let waiting = state.withLock { state -> [Waiter] in
                guard state.answer == nil else { return [] }
                state.answer = answer
                defer { state.waiting = [] }
                return state.waiting
            }
            for waiter in waiting {
                // Answered in time: its deadline is not left on the event loop's timers.
                waiter.deadline.cancel()
                waiter.continuation.resume(returning: answer)
            }
        }

        /// The answer, waiting for it at most `limit`: nil when none came by then.
        func outcome(within limit: TimeAmount, on loop: any EventLoop) async -> Answer? {
            if let answer = state.withLock({ $0.answer }) { return answer }
            return await withCheckedContinuation { (continuation: CheckedContinuation<Answer?, Never>) in
                let answered = state.withLock { state -> Answer? in
                    if let answer = state.answer { return answer }
                    state.nextId += 1
                    let id = state.nextId
                    let deadline = loop.scheduleTask(in: limit) { [self] in self.giveUp(id) }
                    state.waiting.append(Waiter(id: id, continuation: continuation, deadline: deadline))
                    return nil
                }
                if let answered { continuation.resume(returning: answered) }
            }
        }

        private func giveUp(_ id: Int) {
            let late = state.withLock { state -> CheckedContinuation<Answer?, Never>? in
                guard let index = state.waiting.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiting.remove(at: index).continuation
            }
            late?.resume(returning: nil)
        }
    }

    /// What `claim` found.
    enum Claim: Equatable {
        /// This status of this message's receipt was taken here already.
        case repeated
        /// Taken now, for the first time; with the delivery when this gateway wrote the
        /// message to the recipient's socket.
        case first(Delivery?)
    }

    private struct Entry {
        var delivery: Delivery?
        var deliveredTaken = false
        var readTaken = false

        var isEmpty: Bool { delivery == nil && !deliveredTaken && !readTaken }

        func taken(_ delivered: Bool) -> Bool { delivered ? deliveredTaken : readTaken }

        mutating func take(_ delivered: Bool) {
            if delivered { deliveredTaken = true } else { readTaken = true }
        }
    }

    let lifetime: Duration
    private let table: Mutex<RecentTable<Entry>>

    /// 20,000 messages of at most about 250 bytes each (two Whisper IDs, a message and a
    /// connection ID): about 5 MB at most, whatever the load.
    static let standardCapacity = 20_000
    static let standardLifetime: Duration = .seconds(60)

    init(capacity: Int = standardCapacity, lifetime: Duration = standardLifetime) {
        table = Mutex(RecentTable(capacity: capacity))
        self.lifetime = lifetime
    }

    private static func key(_ recipient: String, _ messageId: String) -> String {
        recipient + "/" + Format.lowercased(messageId)
    }

    /// A message written to the recipient's socket here; called before the write, so
    /// its receipt cannot come first. `settling`: written before its store answered.
    func remember(
        recipient: String, messageId: String, sender: String, senderConnection: String, senderGateway: String? = nil, settling: Settling? = nil
    ) {
        let delivery = Delivery(sender: sender, senderConnection: senderConnection, senderGateway: senderGateway, settling: settling)
        let until = ContinuousClock.now + lifetime
        let key = Self.key(recipient, messageId)
        table.withLock { table in
            // Delivered again (a redelivery): what was taken stays taken.
            if var entry = table.value(for: key) {
                entry.delivery = delivery
                table.update(entry, for: key)
            } else {
                table.insert(Entry(delivery: delivery), for: key, until: until)
            }
        }
    }

    /// Takes this status of the message's receipt: the first time it is `first` (with
    /// the delivery, when known), after that `repeated`, until `release` or the end of
    /// the lifetime.
    func claim(_ receipt: PendingQueue.ReceiptApplication) -> Claim {
        let key = Self.key(receipt.recipient, receipt.messageId)
        return table.withLock { table in
            guard var entry = table.value(for: key) else {
                var entry = Entry()
                entry.take(receipt.delivered)
                table.insert(entry, for: key, until: ContinuousClock.now + lifetime)
                return .first(nil)
            }
            guard !entry.taken(receipt.delivered) else { return .repeated }
            entry.take(receipt.delivered)
            table.update(entry, for: key)
            return .first(entry.delivery)
        }
    }

    /// Gives back a claim whose receipt was not passed on after all (Redis ignored it,
    /// or handling it failed): a repeat is then looked up in Redis again.
    func release(_ receipt: PendingQueue.ReceiptApplication) {
        let key = Self.key(receipt.recipient, receipt.messageId)
        table.withLock { table in
            guard var entry = table.value(for: key) else { return }
            if receipt.delivered { entry.deliveredTaken = false } else { entry.readTaken = false }
            if entry.isEmpty { table.remove(key) } else { table.update(entry, for: key) }
        }
    }

    /// The store answered for a message remembered with a `Settling`.
    func settle(recipient: String, messageId: String, _ answer: Settling.Answer) {
        let key = Self.key(recipient, messageId)
        let settling = table.withLock { $0.value(for: key)?.delivery?.settling }
        settling?.settle(answer)
    }

    var count: Int { table.withLock { $0.count } }
}

/// Values kept for a while by key, at most `capacity` of them: past that the oldest
/// go first, and a value past its instant is gone when next asked for. For what a
/// gateway remembers of recent receipts (`ReceiptMemory`), kept
/// inside the owner's lock.
private struct RecentTable<Value> {
    private var entries: [String: (value: Value, until: ContinuousClock.Instant)] = [:]
    /// Keys in the order they were inserted (some already removed), for eviction.
    private var order: [String] = []
    private var head = 0
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    var count: Int { entries.count }

    /// Keeps `value` under `key` until `until` (replacing what was there).
    mutating func insert(_ value: Value, for key: String, until: ContinuousClock.Instant) {
        if entries.updateValue((value, until), forKey: key) == nil {
            order.append(key)
        }
        while entries.count > capacity, head < order.count {
            entries[order[head]] = nil
            head += 1
        }
        // Removed keys stay in `order` until their turn; compact now and then so that
        // it stays near the capacity.
        if head >= capacity || order.count - head > 2 * capacity {
            order = order[head...].filter { entries[$0] != nil }
            head = 0
        }
    }

    /// The value under `key`, unless it is past its instant (then it is dropped).
    mutating func value(for key: String, now: ContinuousClock.Instant = .now) -> Value? {
        guard let entry = entries[key] else { return nil }
        guard now < entry.until else {
            entries[key] = nil
            return nil
        }
        return entry.value
    }

    /// Changes the value under `key`, keeping its instant; nothing when there is none.
    mutating func update(_ value: Value, for key: String) {
        entries[key]?.value = value
    }

    mutating func remove(_ key: String) {
        entries[key] = nil
    }
}
