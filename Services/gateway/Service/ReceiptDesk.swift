import Logging
import NIOCore
import Prometheus
import Synchronization
import WhisperMessaging
import WhisperShared

/// Serves `delivery_receipt` at the gateway, without the router stream: a receipt
/// needs no signature and no identity lookup, only the recipient's own queue and the
/// sender's receipt store, and passing it through a router cost a stream entry, a read,
/// an acknowledgement and two processes' wake-ups per receipt (docs/benchmarks.md).
///
/// Three steps, in an order that loses nothing when the gateway dies between two:
/// 1. look the message up, changing nothing, with the sender's presence in the same
///    round trip (the recipient's bucket was charged before, through the socket's lease);
/// 2. make the `message_delivered` frame safe for the sender: taken by the sender's
///    socket (on this instance, or on another through its gateway: below), or stored
///    for the sender's next fetch (`OwedFrames.keep`);
/// 3. apply the receipt to the recipient's queue (`delivered` removes the message),
///    with other receipts' and in the same write as other work (`ReceiptApplier`).
/// Dying after 1 changes nothing; dying after 2 leaves the message pending, so the
/// recipient fetches and acknowledges it again (the sender may then get the same
/// receipt twice, which clients take as a state). A message leaves the queue only
/// after its receipt is stored, or taken by the sender's socket (below).
///
/// When the sender's socket is on this instance, step 2 is a write to that socket in
/// place of the store: once the socket has taken the frame (handed to the connection,
/// as a stored receipt is settled once written) the receipt is applied; a socket that
/// is closing, has frames waiting or does not take it within 50 ms gets it (`OwedFrames.give`)
/// stored (without a publish) for its next `fetch_pending`. Dying before the write
/// completes leaves the message pending, as above. No pub/sub hop, no store, no settle.
///
/// When the sender's socket is on another gateway, the frame is published to that
/// gateway as a `live_receipt` (`GatewayCommand`), not stored: that gateway does steps
/// 2 and 3 the same way for its own socket (`ControlChannel.takeLive`), and this one
/// applies nothing. A command lost on the way (that gateway dying, its subscriber cut)
/// leaves the message pending, as above; one published to no subscriber is stored
/// here. That saves each such receipt the store's and the settle's writes (two
/// append-only-file fsyncs with `appendfsync always`).
struct ReceiptDesk: Sendable {
    let pending: PendingQueue
    let receipts: OwedFrames
    let passed: Counter
    let ignored: Counter
    let instanceID: String
    let connections: ConnectionRegistry
    let deliveries: LocalDeliveries
    let applier: ReceiptApplier
    /// Receipts served from `deliveries`, without the look-up in Redis.
    let known: Counter
    /// Receipts handed to the gateway of the sender's socket without a store.
    let handedOver: Counter
    /// Those receipts, for a while: that gateway applies them, so until it has, the
    /// message still looks pending here and a repeat would pass the look-up.
    let recentHandOvers: RecentHandOvers
    let redis: RedisClient

    init(
        redis: RedisClient, metrics: ServiceMetrics, receiptsWaitingMax: Int, instanceID: String, connections: ConnectionRegistry,
        deliveries: LocalDeliveries, applier: ReceiptApplier
    ) {
        self.applier = applier
        self.redis = redis
        recentHandOvers = RecentHandOvers()
        handedOver = metrics.counter(
            "gateway_receipts_handed_over",
            help: "delivery_receipt frames passed to the gateway of the sender's socket without being stored (it writes and applies them)."
        )
        self.instanceID = instanceID
        self.connections = connections
        self.deliveries = deliveries
        known = metrics.counter(
            "gateway_receipts_known",
            help: "delivery_receipt frames for messages this gateway had delivered to the recipient's socket itself, passed on without a look-up in Redis."
        )
        pending = PendingQueue(redis: redis)
        receipts = OwedFrames(redis: redis, capacity: receiptsWaitingMax)
        let help = "delivery_receipt frames served by the gateway, by outcome: passed on to the sender, or ignored (unknown message, a repeat)."
        passed = metrics.counter("gateway_receipts", help: help, labels: [("outcome", "passed")])
        ignored = metrics.counter("gateway_receipts", help: help, labels: [("outcome", "ignored")])
    }

    enum Outcome: Equatable {
        case passed
        case ignored
    }

    /// Serves one receipt of `recipient` (the socket's identity, already checked to be
    /// the receipt's `from`, its bucket for receipts already charged).
    @discardableResult
    func serve(_ receipt: DeliveryReceipt, from recipient: String) async throws -> Outcome {
        let delivered = receipt.status == .delivered
        let application = PendingQueue.ReceiptApplication(recipient: recipient, messageId: receipt.messageId, delivered: delivered)
        // A message this gateway delivered itself, from a sender whose socket is still
        // here: step 1 is already known.
        if let delivery = deliveries.take(recipient: recipient, messageId: receipt.messageId, delivered: delivered),
           delivery.sender == receipt.to {
            if let gateway = delivery.senderGateway {
                // Delivered here from another gateway's store: handed to that gateway.
                if try await handToSendersGateway(Self.frame(for: receipt), owner: delivery.sender, application: application,
                                      to: PresenceRecord(gateway: gateway, connId: delivery.senderConnection)) {
                    known.increment()
                    return .passed
                }
            } else if let connection = connections.connection(delivery.senderConnection), connection.whisperId == delivery.sender {
                try await receipts.give(Self.frame(for: receipt), to: connection, owner: delivery.sender)
                await applier.add(application)
                known.increment()
                passed.increment()
                return .passed
            }
        }
        // A repeat of a receipt taken a moment ago, whose application has not run yet
        // (here, or on the sender's gateway it was handed to).
        if applier.awaits(application) || recentHandOvers.contains(application) {
            ignored.increment()
            return .ignored
        }
        let (check, socket) = try await pending.checkReceipt(
            recipient: recipient, messageId: receipt.messageId, delivered: delivered, locating: receipt.to
        )
        switch check {
        case .ignore:
            ignored.increment()
            return .ignored
        case .pass(let sender):
            // A receipt naming someone else as the sender is applied (the message is the
            // recipient's to acknowledge) but told to nobody.
            let tell = sender == receipt.to
            if tell {
                let bytes = Self.frame(for: receipt)
                if let socket, socket.gateway == instanceID {
                    let connection = connections.connection(socket.connId).flatMap { $0.whisperId == sender ? $0 : nil }
                    try await receipts.give(bytes, to: connection, owner: sender)
                } else if let socket {
                    if try await handToSendersGateway(bytes, owner: sender, application: application, to: socket) {
                        return .passed
                    }
                    // That gateway is gone: kept for the sender's next fetch.
                    try await receipts.keep(bytes, for: sender, handingTo: nil)
                } else {
                    try await receipts.keep(bytes, for: sender, handingTo: nil)
                }
            }
            await applier.add(application)
            if tell {
                passed.increment()
                return .passed
            }
            ignored.increment()
            return .ignored
        }
    }

    /// Steps 2 and 3 left to the gateway of the sender's socket (`live_receipt`): it
    /// writes the frame, or stores it, then applies the receipt, so nothing is stored
    /// or applied here. False when no gateway listens on that channel (nothing was done).
    private func handToSendersGateway(
        _ bytes: [UInt8], owner: String, application: PendingQueue.ReceiptApplication, to socket: PresenceRecord
    ) async throws -> Bool {
        let live = LiveReceipt(owner: owner, recipient: application.recipient, messageId: application.messageId, delivered: application.delivered)
        let command = GatewayCommand(kind: .liveReceipt, connId: socket.connId, frame: bytes, live: live)
        guard try await command.publish(to: socket.gateway, on: redis) > 0 else { return false }
        recentHandOvers.insert(application)
        handedOver.increment()
        passed.increment()
        return true
    }

    /// `message_delivered` for the receipt's sender.
    static func frame(for receipt: DeliveryReceipt) -> [UInt8] {
        ServerFrameCodec.encode(MessageDelivered(messageId: receipt.messageId, status: receipt.status, timestamp: receipt.timestamp, from: receipt.from))
    }
}

extension OwedFrames {
    /// How long a sender's socket on this instance may take to accept a receipt before
    /// it is stored instead (a socket with frames waiting is not tried at all).
    static let handOverLimit: TimeAmount = .milliseconds(50)

    /// A receipt for `owner` made safe on this instance: written to the owner's socket
    /// here when it takes it within `handOverLimit` (then nothing is stored), else kept
    /// for the owner's next fetch, and handed to `socket` when one is named.
    func give(_ bytes: [UInt8], to connection: ClientConnection?, owner: String, handingTo socket: PresenceRecord? = nil) async throws {
        if await connection?.sendConfirmed(bytes, within: Self.handOverLimit) != true {
            try await keep(bytes, for: owner, handingTo: socket)
        }
    }
}

/// Receipts this gateway handed to another gateway (`live_receipt`) in the last
/// `window`, by recipient, message and status, at most `capacity` (the oldest go). The
/// sender's gateway applies such a receipt a few milliseconds later (with its next
/// store, or within `GATEWAY_RECEIPT_APPLY_MAX_WAIT_MS`); a repeat from the recipient
/// meanwhile finds the message still pending in Redis, and without this memory it would
/// be passed on a second time. After the window Redis is right again: the receipt was
/// applied, or its command was lost and the message is pending, to be acknowledged anew.
final class RecentHandOvers: Sendable {
    let window: Duration
    private let table: Mutex<RecentTable<Void>>

    init(capacity: Int = 20_000, window: Duration = .seconds(10)) {
        table = Mutex(RecentTable(capacity: capacity))
        self.window = window
    }

    func insert(_ receipt: PendingQueue.ReceiptApplication) {
        let until = ContinuousClock.now + window
        table.withLock { $0.insert((), for: receipt.key, until: until) }
    }

    func contains(_ receipt: PendingQueue.ReceiptApplication) -> Bool {
        table.withLock { $0.value(for: receipt.key) != nil }
    }

    var count: Int { table.withLock { $0.count } }
}
