import Logging
import NIOCore
import Prometheus
import Synchronization
import WhisperMessaging
import WhisperShared

/// Serves `delivery_receipt` at the gateway: look the message up, make `message_delivered`
/// safe for the sender, then apply the receipt to the queue, an order that loses nothing
/// if the gateway dies between steps (docs/architecture.md, "Through the router stream",
/// step 7). The folder holds the rest of a receipt's life.
struct ReceiptDesk: Sendable {
    let pending: PendingQueue
    let owed: OwedFrames
    let memory: ReceiptMemory
    let applier: ReceiptApplier
    let settler: ReceiptSettler
    let presence: PresenceStore
    let connections: ConnectionRegistry
    let instanceID: String
    let redis: RedisClient
    let logger: Logger
    let passed: Counter
    let ignored: Counter
    /// Receipts served from `memory`'s deliveries, without the look-up in Redis.
    let known: Counter
    /// Receipts handed to the gateway of the sender's socket without a store.
    let handedOver: Counter
    /// `delivered` receipts that rode in their message's store (`ReceiptRide`).
    let rode: Counter

    /// How long a sender's socket on this instance may take to accept a receipt before
    /// it is stored instead (a socket with frames waiting is not tried at all).
    static let handOverLimit: TimeAmount = .milliseconds(50)

    /// How long a receipt for a message written while it was stored waits for the
    /// store's answer before Redis is asked instead (a store answers in milliseconds;
    /// one that failed answers at once).
    static let settleLimit: TimeAmount = .seconds(2)

    init(
        redis: RedisClient, metrics: ServiceMetrics, receiptsWaitingMax: Int, applyMaxWait: Duration, instanceID: String,
        connections: ConnectionRegistry, presence: PresenceStore, logger: Logger
    ) {
        self.redis = redis
        self.instanceID = instanceID
        self.connections = connections
        self.presence = presence
        self.logger = logger
        pending = PendingQueue(redis: redis)
        owed = OwedFrames(redis: redis, capacity: receiptsWaitingMax)
        memory = ReceiptMemory()
        applier = ReceiptApplier(pending: pending, memory: memory, maxWait: applyMaxWait, logger: logger)
        settler = ReceiptSettler(receipts: owed, logger: logger)
        handedOver = metrics.counter(
            "gateway_receipts_handed_over",
            help: "delivery_receipt frames passed to the gateway of the sender's socket without being stored (it writes and applies them)."
        )
        rode = metrics.counter(
            "gateway_receipts_rode",
            help: "delivered receipts that came while their message's store was waiting to be written and were recorded in that store: the message was never queued."
        )
        known = metrics.counter(
            "gateway_receipts_known",
            help: "delivery_receipt frames for messages this gateway had delivered to the recipient's socket itself, passed on without a look-up in Redis."
        )
        let help = "delivery_receipt frames served by the gateway, by outcome: passed on to the sender, or ignored (unknown message, a repeat)."
        passed = metrics.counter("gateway_receipts", help: help, labels: [("outcome", "passed")])
        ignored = metrics.counter("gateway_receipts", help: help, labels: [("outcome", "ignored")])
    }

    enum Outcome: Equatable {
        case passed
        case ignored
    }

    /// `delivery_receipt` from a socket acting for `whisperId`: its own receipts only,
    /// charged to the address (in memory, the route's gates) and to the identity's bucket
    /// through the socket's lease, then `serve`. Receipts never enter the router stream, so
    /// a busy stream does not hold them back (they empty queues).
    func serve(_ receipt: DeliveryReceipt, whisperId: String, on connection: ClientConnection, limits: FrameLimits) async throws {
        guard receipt.from == whisperId else { throw FrameRefusal.counted(.forbidden, "from must be the Whisper ID of this session") }
        if case .limited(let retry) = try await limits.charge(
            .receipt, bucket: PendingQueue.receiptBucket(whisperId), limit: .receiptsPerIdentity, on: connection
        ) {
            throw FrameRefusal.over(.receiptsPerIdentity, retryAfterMs: retry)
        }
        try await serve(receipt, from: whisperId)
    }

    /// Serves one receipt of `recipient` (the socket's identity, already checked to be
    /// the receipt's `from`, its bucket for receipts already charged).
    @discardableResult
    func serve(_ receipt: DeliveryReceipt, from recipient: String) async throws -> Outcome {
        let application = PendingQueue.ReceiptApplication(
            recipient: recipient, messageId: receipt.messageId, delivered: receipt.status == .delivered
        )
        // A repeat of a receipt taken a moment ago, whose application may not have run
        // yet (here, or on the sender's gateway it was handed to).
        guard case .first(let delivery) = memory.claim(application) else {
            ignored.increment()
            return .ignored
        }
        let outcome: Outcome
        let handled: Bool
        do {
            (outcome, handled) = try await pass(receipt, application, delivery: delivery)
        } catch {
            memory.release(application)
            throw error
        }
        if !handled { memory.release(application) }
        (outcome == .passed ? passed : ignored).increment()
        return outcome
    }

    /// Steps 1 to 3 of a receipt claimed in `memory`; `handled` is false when nothing
    /// was passed on or applied (Redis ignored it).
    private func pass(
        _ receipt: DeliveryReceipt, _ application: PendingQueue.ReceiptApplication, delivery: ReceiptMemory.Delivery?
    ) async throws -> (outcome: Outcome, handled: Bool) {
        // A message written while it was stored: its sender hears of the receipt only
        // after hearing that it is stored, and never of one the store refused. No answer
        // in time: Redis says (below).
        var delivery = delivery
        if let settling = delivery?.settling {
            // A `delivered` receipt that comes while the store's write still waits rides
            // in it (`ReceiptRide`): the store records the message as delivered instead of
            // queuing it, and the sender is given `message_delivered` with its
            // `message_accepted`; nothing is left to apply.
            if application.delivered, delivery?.sender == receipt.to {
                _ = settling.ride.join(timestamp: receipt.timestamp)
            }
            switch await settling.outcome(within: Self.settleLimit, on: applier.loop) {
            case .storedWithReceipt where application.delivered:
                known.increment()
                rode.increment()
                return (.passed, true)
            case .stored, .storedWithReceipt: break
            case .refused: return (.ignored, false)
            case .none: delivery = nil
            }
        }
        // A message this gateway delivered itself, from a sender whose socket is still
        // known: step 1 is already known.
        if let delivery, delivery.sender == receipt.to {
            if let gateway = delivery.senderGateway {
                // Delivered here from another gateway's store: handed to that gateway.
                if try await handToSendersGateway(receipt, owner: delivery.sender, application,
                                                   to: PresenceRecord(gateway: gateway, connId: delivery.senderConnection)) {
                    known.increment()
                    return (.passed, true)
                }
            } else if let connection = connections.connection(delivery.senderConnection), connection.whisperId == delivery.sender {
                try await give(Self.frame(for: receipt), to: connection, owner: delivery.sender)
                await applier.add(application)
                known.increment()
                return (.passed, true)
            }
        }
        let (check, socket) = try await pending.checkReceipt(
            recipient: application.recipient, messageId: receipt.messageId, delivered: application.delivered, locating: receipt.to
        )
        guard case .pass(let sender) = check else { return (.ignored, false) }
        // A receipt naming someone else as the sender is applied (the message is the
        // recipient's to acknowledge) but told to nobody.
        guard sender == receipt.to else {
            await applier.add(application)
            return (.ignored, true)
        }
        let bytes = Self.frame(for: receipt)
        if let socket, socket.gateway == instanceID {
            let connection = connections.connection(socket.connId).flatMap { $0.whisperId == sender ? $0 : nil }
            try await give(bytes, to: connection, owner: sender)
        } else if let socket, try await handToSendersGateway(receipt, owner: sender, application, to: socket) {
            return (.passed, true)
        } else {
            // Nobody connected, or that gateway is gone: kept for the sender's next fetch.
            try await owed.keep(bytes, for: sender, handingTo: nil)
        }
        await applier.add(application)
        return (.passed, true)
    }

    /// Steps 2 and 3 left to the gateway of the sender's socket (`live_receipt`): it
    /// writes the frame, or stores it, then applies the receipt (`takeLive`), so nothing
    /// is stored or applied here. False when no gateway listens on that channel (nothing
    /// was done).
    private func handToSendersGateway(
        _ receipt: DeliveryReceipt, owner: String, _ application: PendingQueue.ReceiptApplication, to socket: PresenceRecord
    ) async throws -> Bool {
        let live = LiveReceipt(owner: owner, recipient: application.recipient, messageId: application.messageId, delivered: application.delivered)
        let command = GatewayCommand(kind: .liveReceipt, connId: socket.connId, frame: Self.frame(for: receipt), live: live)
        guard try await command.publish(to: socket.gateway, on: redis) > 0 else { return false }
        handedOver.increment()
        return true
    }

    /// A receipt for `owner` made safe on this instance: written to the owner's socket
    /// here when it takes it within `handOverLimit` (then nothing is stored), else kept
    /// for the owner's next fetch, and handed to `socket` when one is named.
    private func give(_ bytes: [UInt8], to connection: ClientConnection?, owner: String, handingTo socket: PresenceRecord? = nil) async throws {
        if await connection?.sendConfirmed(bytes, within: Self.handOverLimit) != true {
            try await owed.keep(bytes, for: owner, handingTo: socket)
        }
    }

    /// A receipt another gateway handed over without storing it (`live_receipt`): written
    /// to its owner's socket, or stored when that socket is gone, is not the owner's, or
    /// cannot take it within `handOverLimit` (a gone socket's receipt is handed to the
    /// owner's socket of now, wherever presence names one: the owner may have moved
    /// since); then applied to the recipient's queue. A store that fails applies nothing:
    /// the message stays pending and is acknowledged again. Called on the event loop
    /// that read the command, so the work goes on in a task.
    func takeLive(_ frame: [UInt8], _ live: LiveReceipt, connection: ClientConnection?) {
        let application = PendingQueue.ReceiptApplication(recipient: live.recipient, messageId: live.messageId, delivered: live.delivered)
        _ = memory.claim(application)
        let owned = connection.flatMap { $0.whisperId == live.owner ? $0 : nil }
        Task {
            do {
                let socket = owned == nil ? try await presence.lookup(live.owner) : nil
                try await give(frame, to: owned, owner: live.owner, handingTo: socket)
            } catch {
                memory.release(application)
                logger.warning("live_receipt_keep_failed", metadata: ["error": "\(error)"])
                return
            }
            await applier.add(application)
        }
    }

    /// Writes a stored receipt to its owner's socket (published here, or kept by this
    /// instance) and settles it once written. Only to the socket of the receipt's owner;
    /// left stored otherwise.
    func handOver(_ frame: [UInt8], stored: StoredReceipt, to connection: ClientConnection) {
        guard connection.whisperId == stored.owner else { return }
        let settler = self.settler
        connection.sendRaw(frame) { settler.settle(stored) }
    }

    /// `message_delivered` for the receipt's sender.
    static func frame(for receipt: DeliveryReceipt) -> [UInt8] {
        PendingQueue.deliveredFrame(messageId: receipt.messageId, status: receipt.status, timestamp: receipt.timestamp, from: receipt.from)
    }
}
